package io.mcore4j.pipeline;

/**
 * Which global transformer layers each (pipeline rank, model chunk) holds.
 *
 * <p>Layers are laid out over virtual stages in the order {@code v = chunk * P + rank}: virtual
 * stage {@code v} holds a contiguous run of layers following those of virtual stage {@code v - 1}.
 * So with 8 layers, 2 ranks and 2 chunks, rank 0 holds layers {@code [0, 1]} and {@code [4, 5]},
 * rank 1 holds {@code [2, 3]} and {@code [6, 7]} (Megatron-Core's interleaved layout).
 * {@link #even} gives every virtual stage the same count; {@link #withFirstLast} gives the first and
 * the last pipeline rank their own counts (each spread evenly over its chunks) and splits the rest
 * evenly over the middle ranks. Immutable and thread-safe.
 */
public final class LayerAssignment {
    private final int numLayers;
    private final int pipelineSize;
    private final int virtualSize;
    /** Layers per chunk on each rank (the same for every chunk of a rank). */
    private final int[] perChunk;

    private LayerAssignment(int numLayers, int pipelineSize, int virtualSize, int[] perChunk) {
        this.numLayers = numLayers;
        this.pipelineSize = pipelineSize;
        this.virtualSize = virtualSize;
        this.perChunk = perChunk;
    }

    /**
     * Every virtual stage holds {@code numLayers / (pipelineSize * virtualSize)} layers.
     *
     * @param numLayers number of layers of the model, at least 1
     * @param pipelineSize number of pipeline ranks
     * @param virtualSize model chunks per rank (1 without interleaving)
     * @return the assignment
     * @throws IllegalArgumentException if the layers do not split evenly
     */
    public static LayerAssignment even(int numLayers, int pipelineSize, int virtualSize) {
        checkSizes(numLayers, pipelineSize, virtualSize);
        int stages = pipelineSize * virtualSize;
        if (numLayers % stages != 0) {
            throw new IllegalArgumentException(numLayers + " layers do not split evenly over " + pipelineSize
                    + " pipeline ranks x " + virtualSize + " chunks = " + stages + " virtual stages");
        }
        int[] perChunk = new int[pipelineSize];
        java.util.Arrays.fill(perChunk, numLayers / stages);
        return new LayerAssignment(numLayers, pipelineSize, virtualSize, perChunk);
    }

    /**
     * The first pipeline rank holds {@code firstStageLayers} layers and the last rank
     * {@code lastStageLayers} (each split evenly over its chunks); the middle ranks split the rest
     * evenly (Megatron-Core's uneven pipeline split).
     *
     * @param numLayers number of layers of the model
     * @param pipelineSize number of pipeline ranks, at least 2
     * @param virtualSize model chunks per rank
     * @param firstStageLayers layers on pipeline rank 0, over all its chunks, at least 0
     * @param lastStageLayers layers on the last pipeline rank, over all its chunks, at least 0
     * @return the assignment
     * @throws IllegalArgumentException naming the count that does not split
     */
    public static LayerAssignment withFirstLast(int numLayers, int pipelineSize, int virtualSize,
                                                int firstStageLayers, int lastStageLayers) {
        checkSizes(numLayers, pipelineSize, virtualSize);
        if (pipelineSize < 2) {
            throw new IllegalArgumentException("separate first and last stage layer counts need a pipeline size"
                    + " of at least 2, got " + pipelineSize);
        }
        if (firstStageLayers < 0 || lastStageLayers < 0) {
            throw new IllegalArgumentException("first stage layers " + firstStageLayers + " and last stage layers "
                    + lastStageLayers + " must be >= 0");
        }
        int middle = numLayers - firstStageLayers - lastStageLayers;
        if (middle < 0) {
            throw new IllegalArgumentException("first stage layers " + firstStageLayers + " + last stage layers "
                    + lastStageLayers + " exceed the " + numLayers + " layers of the model");
        }
        splits("first stage layers", firstStageLayers, virtualSize, "chunks");
        splits("last stage layers", lastStageLayers, virtualSize, "chunks");
        int middleRanks = pipelineSize - 2;
        int perMiddleRank = 0;
        if (middleRanks == 0) {
            if (middle != 0) {
                throw new IllegalArgumentException("with 2 pipeline ranks the first stage layers " + firstStageLayers
                        + " + last stage layers " + lastStageLayers + " must equal the " + numLayers + " layers");
            }
        } else {
            splits(numLayers + " - " + firstStageLayers + " - " + lastStageLayers + " middle layers", middle,
                    middleRanks, "middle pipeline ranks");
            perMiddleRank = middle / middleRanks;
            splits("middle layers per rank", perMiddleRank, virtualSize, "chunks");
        }
        int[] perChunk = new int[pipelineSize];
        java.util.Arrays.fill(perChunk, perMiddleRank / virtualSize);
        perChunk[0] = firstStageLayers / virtualSize;
        perChunk[pipelineSize - 1] = lastStageLayers / virtualSize;
        return new LayerAssignment(numLayers, pipelineSize, virtualSize, perChunk);
    }

    private static void checkSizes(int numLayers, int pipelineSize, int virtualSize) {
        if (numLayers < 1) {
            throw new IllegalArgumentException("number of layers must be at least 1, got " + numLayers);
        }
        if (pipelineSize < 1) {
            throw new IllegalArgumentException("pipeline size must be at least 1, got " + pipelineSize);
        }
        if (virtualSize < 1) {
            throw new IllegalArgumentException("number of chunks per rank must be at least 1, got " + virtualSize);
        }
    }

    private static void splits(String what, int count, int parts, String partName) {
        if (count % parts != 0) {
            throw new IllegalArgumentException(what + " = " + count + " do not split evenly over " + parts + " " + partName);
        }
    }

    /**
     * The global layer indices held by a rank's chunk, ascending and contiguous.
     *
     * @param pipelineRank the pipeline rank
     * @param chunk the model chunk on that rank
     * @return the layer indices (possibly empty with {@link #withFirstLast} and a count of 0)
     */
    public int[] layers(int pipelineRank, int chunk) {
        int first = firstLayer(pipelineRank, chunk);
        int[] out = new int[perChunk[pipelineRank]];
        for (int i = 0; i < out.length; i++) {
            out[i] = first + i;
        }
        return out;
    }

    /**
     * The index of the first layer a rank's chunk holds (its layer offset).
     *
     * @param pipelineRank the pipeline rank
     * @param chunk the model chunk on that rank
     * @return the global index of its first layer
     */
    public int firstLayer(int pipelineRank, int chunk) {
        check(pipelineRank, chunk);
        int perVirtualRound = 0;
        for (int c : perChunk) {
            perVirtualRound += c;
        }
        int offset = chunk * perVirtualRound;
        for (int r = 0; r < pipelineRank; r++) {
            offset += perChunk[r];
        }
        return offset;
    }

    /**
     * Number of layers a rank's chunk holds.
     *
     * @param pipelineRank the pipeline rank
     * @param chunk the model chunk on that rank
     * @return the count
     */
    public int layerCount(int pipelineRank, int chunk) {
        check(pipelineRank, chunk);
        return perChunk[pipelineRank];
    }

    /**
     * The virtual stage of a rank's chunk: {@code chunk * pipelineSize + pipelineRank}.
     *
     * @param pipelineRank the pipeline rank
     * @param chunk the model chunk
     * @return the virtual stage index
     */
    public int virtualStage(int pipelineRank, int chunk) {
        check(pipelineRank, chunk);
        return chunk * pipelineSize + pipelineRank;
    }

    /** @return number of layers of the model */
    public int numLayers() {
        return numLayers;
    }

    /** @return number of pipeline ranks */
    public int pipelineSize() {
        return pipelineSize;
    }

    /** @return model chunks per rank */
    public int virtualSize() {
        return virtualSize;
    }

    private void check(int pipelineRank, int chunk) {
        if (pipelineRank < 0 || pipelineRank >= pipelineSize) {
            throw new IllegalArgumentException("pipeline rank " + pipelineRank + " is outside [0, " + pipelineSize + ")");
        }
        if (chunk < 0 || chunk >= virtualSize) {
            throw new IllegalArgumentException("chunk " + chunk + " is outside [0, " + virtualSize + ")");
        }
    }

    @Override
    public String toString() {
        return "LayerAssignment{" + numLayers + " layers, pipeline " + pipelineSize + ", chunks " + virtualSize
                + ", per chunk " + java.util.Arrays.toString(perChunk) + "}";
    }
}
