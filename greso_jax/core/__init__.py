"""Leaves every layer may use: name registries, typed field specs and their checker, file hashes, op profiles."""
