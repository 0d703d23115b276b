package io.mcore4j.planner;

import java.util.Locale;

/**
 * One iteration's time on the slowest rank, in seconds, by what spends it.
 *
 * @param compute forward and backward of every micro-batch on the slowest stage (recompute included)
 * @param tensorParallelComm tensor-parallel all-reduces (or SP's gathers and scatters) nothing hides
 * @param contextParallelComm context-parallel key/value exchanges nothing hides
 * @param expertParallelComm the MoE token all-to-alls
 * @param pipelineBubble the schedule's fill and drain: (PP - 1) / VP micro-batch stage times, plus stage-to-stage transfers
 * @param dataParallelSync the gradient reduction (and the distributed optimizer's parameter gather) after backward
 * @param optimizer the gradient copy into buffers and the optimizer step
 * @param tokensPerStep tokens of one iteration, all ranks together
 * @param worldSize ranks
 * @param modelFlopsPerToken Megatron's training FLOPs per token of the model
 * @param peakTflops one GPU's peak
 */
public record TimeEstimate(double compute, double tensorParallelComm, double contextParallelComm,
                           double expertParallelComm, double pipelineBubble, double dataParallelSync, double optimizer,
                           long tokensPerStep, int worldSize, double modelFlopsPerToken, double peakTflops) {

    /** @return seconds per iteration */
    public double total() {
        return compute + tensorParallelComm + contextParallelComm + expertParallelComm + pipelineBubble
                + dataParallelSync + optimizer;
    }

    /** @return tokens per second per GPU */
    public double tokensPerSecondPerGpu() {
        return tokensPerStep / total() / worldSize;
    }

    /** @return model FLOP/s utilisation (Megatron's formula, as pretrain-gpt reports it) */
    public double mfu() {
        return tokensPerSecondPerGpu() * modelFlopsPerToken / (peakTflops * 1e12);
    }

    /** @return a one-line breakdown in milliseconds */
    public String describe() {
        return String.format(Locale.ROOT, "%.1f ms = compute %.1f + TP comm %.1f + CP comm %.1f + EP comm %.1f"
                        + " + bubble %.1f + DP sync %.1f + optimizer %.1f; %,.0f tokens/s/GPU, MFU %.1f%%",
                ms(total()), ms(compute), ms(tensorParallelComm), ms(contextParallelComm), ms(expertParallelComm),
                ms(pipelineBubble), ms(dataParallelSync), ms(optimizer), tokensPerSecondPerGpu(), 100 * mfu());
    }

    private static double ms(double seconds) {
        return seconds * 1e3;
    }
}
