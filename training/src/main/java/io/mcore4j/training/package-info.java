/**
 * The order of one training step and of the loop around it: the pipeline schedule over the
 * micro-batches, loss and auxiliary-loss scaling, data-parallel gradient sync, unscale/clip/skip,
 * the optimizer step, evaluation, checkpoint cadence and metrics. Front-ends (pretrain-gpt, the
 * benchmark, users' programs) call it; they never re-assemble a step.
 */
package io.mcore4j.training;
