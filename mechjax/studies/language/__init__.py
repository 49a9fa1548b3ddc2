"""Language models trained here on real text, and what the pretrained tools find in them."""
