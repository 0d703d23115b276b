/**
 * Where a training run's scalars go: the {@link io.mcore4j.training.metrics.MetricsSink} contract
 * with Megatron-LM's TensorBoard names ({@link io.mcore4j.training.metrics.MetricNames}), and its
 * sinks: a JSON Lines file ({@link io.mcore4j.training.metrics.JsonlMetricsSink}), TensorBoard event
 * files written in pure Java ({@link io.mcore4j.training.metrics.TensorBoardSink}), the console with
 * a progress bar on terminals ({@link io.mcore4j.training.metrics.ConsoleMetricsSink}) and a PNG loss
 * curve ({@link io.mcore4j.training.metrics.LossCurveSink}).
 */
package io.mcore4j.training.metrics;
