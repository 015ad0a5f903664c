"""pyew's code generator: spec (TOML) -> typed model -> Mako templates -> build/."""
