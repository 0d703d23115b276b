/**
 * Training-step machinery after backward: data-parallel gradient buckets
 * ({@link io.mcore4j.optimizer.DistributedDataParallel}), the optimizer with fp32 master weights,
 * dynamic loss scaling, global-norm clipping, an optional ZeRO-1 sharding of its state
 * ({@link io.mcore4j.optimizer.MegatronOptimizer}) and an optional CPU offload of part of that state
 * ({@link io.mcore4j.optimizer.OptimizerConfig#optimizerCpuOffload()}), and the learning-rate and weight-decay schedules.
 * Every collective runs over a group taken from the {@link io.mcore4j.parallel.ProcessGroups} passed in.
 */
package io.mcore4j.optimizer;
