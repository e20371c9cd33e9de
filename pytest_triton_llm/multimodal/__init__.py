"""Images for the multimodal suite: drawn with Pillow, nothing downloaded, and the pixels a client sends for them."""
