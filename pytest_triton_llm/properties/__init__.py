"""The property matrix (issue 45): every request input of every served contract, with the check that proves its
documented effect, on every path that serves it (fixtures/properties.toml)."""
