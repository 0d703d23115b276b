package io.mcore4j.core.fp8;

import java.util.Locale;

/** How delayed scaling turns an amax history into the amax a scale is computed from, Megatron's {@code --fp8-amax-compute-algo}. */
public enum AmaxComputeAlgo {
    /** The amax of the latest step. */
    MOST_RECENT,
    /** The largest amax of the history (a NaN in it wins, and then the scale is kept). */
    MAX;

    /** @return Megatron's name, {@code most_recent} or {@code max} */
    public String megatronName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /**
     * @param name Megatron's name
     * @return the algorithm
     * @throws IllegalArgumentException for any other name
     */
    public static AmaxComputeAlgo of(String name) {
        for (AmaxComputeAlgo a : values()) {
            if (a.megatronName().equals(name)) {
                return a;
            }
        }
        throw new IllegalArgumentException("--fp8-amax-compute-algo " + name + " is not supported: use most_recent or max");
    }
}
