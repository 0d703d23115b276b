/**
 * Java-defined backward passes on top of libtorch autograd. A {@link io.mcore4j.core.autograd.Function}
 * has a Java forward and backward; {@link io.mcore4j.core.autograd.AutogradScope} applies it by
 * cutting the libtorch graph at the function's outputs and, on backward, walks the recorded cuts in
 * reverse, running libtorch's backward segment by segment with explicit upstream gradients.
 */
package io.mcore4j.core.autograd;
