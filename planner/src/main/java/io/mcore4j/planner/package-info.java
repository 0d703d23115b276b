/**
 * The parallelism planner: given a model, a global batch, a sequence length and a cluster, it
 * enumerates the layouts mcore4j can run (TP, PP, VP, DP, CP, EP, micro-batch, recompute), rejects
 * those the training setup refuses, estimates each rank's memory from the parameters the model
 * builds and the state the optimizer keeps, estimates the step time from a calibration measured by
 * the GPU benchmark, and ranks the layouts that fit. Nothing here allocates tensors.
 */
package io.mcore4j.planner;
