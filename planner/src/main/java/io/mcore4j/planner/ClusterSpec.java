package io.mcore4j.planner;

import com.google.gson.Gson;
import com.google.gson.JsonParseException;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The machines a job runs on: identical nodes of identical GPUs. Bandwidths are bus bandwidths of an
 * all-reduce (NCCL's {@code busbw}), in GB/s (10^9 bytes per second).
 *
 * <p>JSON form (every field required): {@code {"gpusPerNode": 8, "nodes": 2, "gpuMemoryGiB": 139.7,
 * "peakTflops": 989, "memoryBandwidthGBps": 4800, "intraNodeBandwidthGBps": 340,
 * "interNodeBandwidthGBps": 45}}.
 *
 * @param gpusPerNode GPUs in one node
 * @param nodes number of nodes
 * @param gpuMemoryGiB memory of one GPU, GiB (what the driver reports as total)
 * @param peakTflops dense fp16/bf16 peak of one GPU, TFLOP/s (989 for H100 and H200)
 * @param memoryBandwidthGBps device-memory bandwidth of one GPU, GB/s
 * @param intraNodeBandwidthGBps all-reduce bus bandwidth between GPUs of one node, GB/s
 * @param interNodeBandwidthGBps all-reduce bus bandwidth of a group spanning nodes, GB/s
 */
public record ClusterSpec(int gpusPerNode, int nodes, double gpuMemoryGiB, double peakTflops,
                          double memoryBandwidthGBps, double intraNodeBandwidthGBps, double interNodeBandwidthGBps) {

    /**
     * Validates the values.
     *
     * @throws IllegalArgumentException naming the field that is not positive
     */
    public ClusterSpec {
        positive("gpusPerNode", gpusPerNode);
        positive("nodes", nodes);
        positive("gpuMemoryGiB", gpuMemoryGiB);
        positive("peakTflops", peakTflops);
        positive("memoryBandwidthGBps", memoryBandwidthGBps);
        positive("intraNodeBandwidthGBps", intraNodeBandwidthGBps);
        positive("interNodeBandwidthGBps", interNodeBandwidthGBps);
    }

    /**
     * One node of H200s (139.7 GiB, 989 TFLOP/s, 4.8 TB/s) with NVLink: 340 GB/s all-reduce bus
     * bandwidth as measured by {@code nccl/scripts/gpu-check.sh} on four GPUs; 45 GB/s between nodes
     * (400 Gb/s InfiniBand per GPU, an assumption: nothing across nodes was measured).
     *
     * @param gpus GPUs in the node
     * @param nodes nodes
     * @return the cluster
     */
    public static ClusterSpec h200(int gpus, int nodes) {
        return new ClusterSpec(gpus, nodes, 139.7, 989, 4800, 340, 45);
    }

    /**
     * Nodes of H100 SXM GPUs (79.1 GiB, 989 TFLOP/s, 3.35 TB/s), same links as {@link #h200}.
     *
     * @param gpus GPUs per node
     * @param nodes nodes
     * @return the cluster
     */
    public static ClusterSpec h100(int gpus, int nodes) {
        return new ClusterSpec(gpus, nodes, 79.1, 989, 3350, 340, 45);
    }

    /** @return GPUs in the whole cluster */
    public int worldSize() {
        return gpusPerNode * nodes;
    }

    /** @return one GPU's memory in bytes */
    public long gpuMemoryBytes() {
        return (long) (gpuMemoryGiB * (1L << 30));
    }

    /**
     * The bus bandwidth a collective over a group gets: intra-node unless the group's ranks span
     * nodes. Ranks are laid out as Megatron-Core's order {@code tp-cp-ep-dp-pp}: a group of
     * {@code size} ranks {@code stride} apart spans {@code size * stride} consecutive ranks.
     *
     * @param size ranks in the group
     * @param stride distance between consecutive ranks of the group
     * @return bytes per second
     */
    public double busBandwidth(int size, int stride) {
        boolean crossesNodes = (long) size * stride > gpusPerNode;
        return (crossesNodes ? interNodeBandwidthGBps : intraNodeBandwidthGBps) * 1e9;
    }

    /**
     * Reads the JSON form.
     *
     * @param file a JSON file
     * @return the cluster
     * @throws IllegalArgumentException naming the file and what is wrong with it
     */
    public static ClusterSpec read(Path file) {
        String text;
        try {
            text = Files.readString(file);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read cluster file " + file + ": " + e.getMessage(), e);
        }
        try {
            Json j = new Gson().fromJson(text, Json.class);
            if (j == null) {
                throw new IllegalArgumentException("cluster file " + file + " is empty");
            }
            return new ClusterSpec(j.gpusPerNode, j.nodes, j.gpuMemoryGiB, j.peakTflops, j.memoryBandwidthGBps,
                    j.intraNodeBandwidthGBps, j.interNodeBandwidthGBps);
        } catch (JsonParseException | IllegalArgumentException e) {
            throw new IllegalArgumentException("cluster file " + file + ": " + e.getMessage(), e);
        }
    }

    /** @return the JSON form */
    public String toJson() {
        Json j = new Json();
        j.gpusPerNode = gpusPerNode;
        j.nodes = nodes;
        j.gpuMemoryGiB = gpuMemoryGiB;
        j.peakTflops = peakTflops;
        j.memoryBandwidthGBps = memoryBandwidthGBps;
        j.intraNodeBandwidthGBps = intraNodeBandwidthGBps;
        j.interNodeBandwidthGBps = interNodeBandwidthGBps;
        return new Gson().toJson(j);
    }

    private static void positive(String field, double value) {
        if (!(value > 0) || Double.isInfinite(value)) {
            throw new IllegalArgumentException(field + " must be a positive number, got " + value);
        }
    }

    /** Gson's view of the file; absent fields stay 0 and fail validation by name. */
    private static final class Json {
        int gpusPerNode;
        int nodes;
        double gpuMemoryGiB;
        double peakTflops;
        double memoryBandwidthGBps;
        double intraNodeBandwidthGBps;
        double interNodeBandwidthGBps;
    }
}
