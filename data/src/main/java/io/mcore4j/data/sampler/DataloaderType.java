package io.mcore4j.data.sampler;

/** How training reads its samples (Megatron's {@code --dataloader-type}; its {@code external} is not offered). */
public enum DataloaderType {
    /** In order, each sample once per pass: {@link PretrainingSampler} (Megatron's default). */
    SINGLE,
    /** A random order per data-parallel bucket, reshuffled every epoch: {@link CyclicPretrainingSampler}. */
    CYCLIC
}
