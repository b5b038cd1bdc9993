"""``python -m espnet_dynres.bin.asr_train``: ESPnet's ``asr_train`` (same arguments) with the plugin registered."""

import espnet_dynres  # noqa: F401  (registers the plugin's names with ESPnet)
from espnet2.bin.asr_train import main

if __name__ == "__main__":
    main()
