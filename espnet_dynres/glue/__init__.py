"""How the plugin meets ESPnet: registration (:mod:`.registration`), builders, launcher, config export and checks."""
