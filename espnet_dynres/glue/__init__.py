"""How the plugin meets ESPnet: registration of the five names (:mod:`.registration`, the one module
that registers), the model and iterator builders, the launcher, the stock-ESPnet config export, and
the checks of configs and data that run before training."""
