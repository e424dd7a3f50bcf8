"""Tuned schedule databases of the PIM kernels (package data ``tvm_pim.schedules``), one folder per device."""
