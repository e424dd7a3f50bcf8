"""Solvers the scheduling pieces share.

=================  ================================================================
module             what it solves
=================  ================================================================
``knapsack``       replicas per operator under a core budget (multiple-choice knapsack
                   by dynamic programming; sum or max objective)
``segments``       cutting an operator chain into consecutive segments by dynamic
                   programming, with a cost per segment and per transition
``milp``           mixed-integer linear programs on HiGHS (``highspy``), with a time
                   limit and a seed
``factorize``      MIREDO's flexible factorisation of loop bounds (Alg. 1)
``ga``             genetic algorithms on DEAP, seeded, with progress and a time limit
=================  ================================================================
"""
