"""What the CIM and the PIM backends share; nothing here knows of crossbars or banks.

=================  ==============================================================
module             what it holds
=================  ==============================================================
``schema``         field types and the ``Meta`` table of every hardware file
``hardware``       finding presets, loading and validating hardware files (pydantic)
``target``         ``cim -hw=...`` / ``pim -hw=...`` target tags, the Relax pipeline hook
``relax_utils``    shapes of Relax expressions, composite functions, call-site and caller rewrites,
                   constant folding in numpy
``layout``         data-layout helpers (im2col)
``runtime``        statistics collectors and per-device simulator objects
``onnx_io``        reading ONNX files and ``zoo:`` specs, importing them into Relax, inputs
``zoo``            the model zoo (CNNs, transformer layers, decode steps) built in code
``report``         comparison with a reference, unit formatting, writing reports
``sweep``          design-space sweeps on Ray: grid, cache, table, plots
``cli``            the error type for bad input and the shared command-line plumbing
=================  ==============================================================

``tvm_pim`` imports only this subpackage of ``tvm_cim``.
"""
