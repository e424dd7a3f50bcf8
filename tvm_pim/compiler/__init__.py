"""The PIM compiler below the Relax level: from a kernel to a command stream (DCC, paper 002).

===========  ===================================================================
module       what it holds
===========  ===================================================================
``kernels``  the kernels PIM runs (GEMV, RED, VA, RELU, ATTN) as TIR PrimFuncs,
             with numpy references and FP16 error bounds
``space``    the data-centric schedule space: dimension sets, tiling drafts,
             the three pruning rules, the space as ``s_tir`` sampling
             instructions, the backend's default draft
``codegen``  a draft lowered to the device's command set, with DCC's code
             optimiser (staged rearrangement, hierarchical commands)
===========  ===================================================================

Choosing a draft (simulation, the XGBoost predictor, meta-schedule tuning,
tuned databases) is :mod:`tvm_pim.search`; their costs are :mod:`tvm_pim.cost`.
"""
