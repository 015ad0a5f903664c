"""Binders for the special kernel kinds (relu_mask, mask_backward, upsample_nearest2d, dot,
scatter_add). Importing this module registers them with pyew.opcall."""
