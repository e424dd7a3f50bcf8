"""PIM hardware: the schema of device files and the system / group / core view the compiler uses."""
