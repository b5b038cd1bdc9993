"""``python -m espnet_dynres.bin.asr_inference``: ESPnet's ``asr_inference`` with the plugin registered.

Takes exactly the arguments of ``python -m espnet2.bin.asr_inference``; decoding
always runs the dynres frontend at the standard frame rate (eval mode).
"""

import espnet_dynres  # noqa: F401  (registers the plugin's names with ESPnet)
from espnet2.bin.asr_inference import main

if __name__ == "__main__":
    main()
