/**
 * Parameters and modules. A {@link io.mcore4j.core.nn.Parameter} owns its tensor and says how it is
 * partitioned, so optimizers and checkpoints can treat every layer alike; a
 * {@link io.mcore4j.core.nn.Module} exposes its parameters, their checkpoint keys and its checkpoint
 * pieces. {@link io.mcore4j.core.nn.AbstractModule} derives all of those from children and
 * parameters registered once in the constructor; {@link io.mcore4j.core.nn.ModuleList} and
 * {@link io.mcore4j.core.nn.Sequential} hold children for users, and
 * {@link io.mcore4j.core.nn.UnaryModule} is what a sequential chain calls. Models tell the training
 * machinery when gradients are complete ({@link io.mcore4j.core.nn.GradientReadyListener}) and before
 * parameters are read ({@link io.mcore4j.core.nn.ForwardPreHook}).
 */
package io.mcore4j.core.nn;
