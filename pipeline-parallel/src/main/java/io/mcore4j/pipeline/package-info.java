/**
 * Pipeline parallelism: point-to-point transfers between adjacent stages over the pipeline group
 * ({@link io.mcore4j.pipeline.P2pCommunication}), the forward-backward schedules (no pipelining,
 * 1F1B and interleaved 1F1B, entry point {@link io.mcore4j.pipeline.Schedules}) and the pure
 * functions behind them: warmup counts and micro-batch order ({@link io.mcore4j.pipeline.ScheduleTable}),
 * each stage's exact action sequence ({@link io.mcore4j.pipeline.StagePlan}) and which layers a stage
 * holds ({@link io.mcore4j.pipeline.LayerAssignment}).
 */
package io.mcore4j.pipeline;
