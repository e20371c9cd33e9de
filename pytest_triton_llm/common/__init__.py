"""What every layer shares: the one-line errors, TOML schemas, progress lines, tables, the project's files, option
parsing errors and the prompt sets."""
