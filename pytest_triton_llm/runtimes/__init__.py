"""Where tritonserver runs. One module per runtime; each returns a `TritonServer` handle."""
