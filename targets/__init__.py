"""Hardware presets: one TOML file per chip or device (package data ``tvm_cim.targets``)."""
