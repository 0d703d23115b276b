/**
 * Data-parallel sampling: which sample indices each data-parallel rank reads for each micro-batch, starting
 * from any number of samples already consumed so that a resumed run continues exactly where it stopped.
 */
package io.mcore4j.data.sampler;
