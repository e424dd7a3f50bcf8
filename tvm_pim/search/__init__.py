"""Choosing tiling drafts: schedule strategies, meta-schedule tuning and the tuned databases.

================  ==============================================================
module            what it holds
================  ==============================================================
``strategy``      ``auto`` / ``database`` / ``predictor`` / ``simulate`` / ``default``
``tuning``        :func:`tune`: meta-schedule's evolutionary search over the space
``metaschedule``  the simulator-backed builder, runner, mutator, postprocessor and
                  the predictor as cost model
``database``      where databases and predictors live (user, shipped), record keys
================  ==============================================================
"""
