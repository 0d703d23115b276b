/**
 * The in-JVM backend: ranks are threads of one JVM and collectives exchange tensor references
 * through shared memory. Used by tests and by single-machine CPU training;
 * {@link io.mcore4j.parallel.inprocess.InJvmWorld} starts the rank threads.
 */
package io.mcore4j.parallel.inprocess;
