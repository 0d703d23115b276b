/**
 * Deterministic randomness that does not use libtorch's process-wide generator (shared by every
 * thread of a JVM): seeds are derived from (base seed, region, coordinates), Java-side streams
 * initialise weights, and a counter-based hash computed with integer tensor ops draws dropout
 * masks on the tensor's own device.
 */
package io.mcore4j.core.random;
