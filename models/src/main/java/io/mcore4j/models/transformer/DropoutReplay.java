package io.mcore4j.models.transformer;

import io.mcore4j.core.autograd.Recompute;
import io.mcore4j.core.random.DeterministicRandom;

/** Replays a dropout generator's position so that recomputed masks equal the first run's. */
record DropoutReplay(DeterministicRandom... generators) implements Recompute.Replay {
    @Override
    public Object capture() {
        long[] states = new long[generators.length];
        for (int i = 0; i < states.length; i++) {
            states[i] = generators[i].state();
        }
        return states;
    }

    @Override
    public void restore(Object token) {
        long[] states = (long[]) token;
        for (int i = 0; i < states.length; i++) {
            generators[i].restore(states[i]);
        }
    }
}
