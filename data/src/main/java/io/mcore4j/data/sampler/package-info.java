/**
 * Data-parallel sampling: which sample indices each data-parallel rank reads for each micro-batch, starting
 * from any number of samples already consumed so that a resumed run continues exactly where it stopped:
 * in order ({@link io.mcore4j.data.sampler.PretrainingSampler}, Megatron's {@code --dataloader-type single})
 * or in a random order per epoch that cycles ({@link io.mcore4j.data.sampler.CyclicPretrainingSampler},
 * {@code --dataloader-type cyclic}).
 */
package io.mcore4j.data.sampler;
