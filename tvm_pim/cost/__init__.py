"""What a tiling draft, a kernel or a graph costs: simulated, learned and on the host.

============  ==================================================================
module        what it holds
============  ==================================================================
``host``      the host GPU as a roofline (DCC's baseline, host operators of a graph)
``measure``   a draft's simulated time (the ground truth), exhaustive search over
              a list, a lower bound of any draft's time
``features``  the feature vector of a (kernel, draft, device) triple
``predictor`` DCC's coupled XGBoost predictor: training samples, model, lookup table
============  ==================================================================
"""
