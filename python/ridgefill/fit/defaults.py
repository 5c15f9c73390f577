"""The fit's defaults, in one light module that the CLI reads without importing numpy or the runtime."""

# Calibration tokens: those of the fits every published figure comes from (tune's, the frontier's). Four times
# the text lowers the held-out error yet retrieves no more needles (experiments/calib-size), so 16,384 it stays.
DEFAULT_TOKENS = 16384
DEFAULT_RANKS = (32, 64, 128, 256)  # window-projection columns a window fit tries
DEFAULT_WINDOW_GAIN = 0.05  # the held-out error share window maps must cut to be kept
