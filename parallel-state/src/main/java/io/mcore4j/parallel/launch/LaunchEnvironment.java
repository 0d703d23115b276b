package io.mcore4j.parallel.launch;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * Where this process sits in a multi-process job, as told by its launcher: global and node-local
 * rank and size, and the address of rank 0's rendezvous store.
 *
 * <p>{@link #from(Map)} reads the variables of the first launcher it recognises, in this order:
 * <ol>
 *   <li><b>torchrun</b> (any of {@code RANK}, {@code WORLD_SIZE} set): {@code RANK}, {@code WORLD_SIZE}
 *       required; {@code LOCAL_RANK} and {@code LOCAL_WORLD_SIZE} both or neither (neither means one
 *       node: local = global).</li>
 *   <li><b>Slurm</b> ({@code SLURM_PROCID} set): {@code SLURM_PROCID}, {@code SLURM_NTASKS}
 *       (or {@code SLURM_NPROCS}), {@code SLURM_LOCALID}; tasks on this node from
 *       {@code SLURM_NTASKS_PER_NODE}, else {@code SLURM_TASKS_PER_NODE} at {@code SLURM_NODEID}
 *       (e.g. {@code 4(x2),3}), else {@code SLURM_NTASKS / SLURM_NNODES} when that divides.
 *       {@code MASTER_ADDR} defaults to the first host of {@code SLURM_JOB_NODELIST} (or
 *       {@code SLURM_NODELIST}); {@code MASTER_PORT} defaults to {@code 10000 + SLURM_JOB_ID % 10000}
 *       so that two jobs sharing a node do not race for one port.</li>
 *   <li><b>Open MPI</b> ({@code OMPI_COMM_WORLD_RANK} set): {@code OMPI_COMM_WORLD_RANK},
 *       {@code OMPI_COMM_WORLD_SIZE}, {@code OMPI_COMM_WORLD_LOCAL_RANK},
 *       {@code OMPI_COMM_WORLD_LOCAL_SIZE}.</li>
 * </ol>
 * For every launcher an explicit {@code MASTER_ADDR} / {@code MASTER_PORT} wins. Without one,
 * {@code MASTER_ADDR} is {@value #DEFAULT_MASTER_ADDR} when every rank runs on this node and an error
 * otherwise, and {@code MASTER_PORT} is {@value #DEFAULT_MASTER_PORT}. A missing or invalid value is an
 * {@link IllegalArgumentException} naming the variable and its value.
 *
 * @param rank global rank, in {@code [0, worldSize)}
 * @param localRank rank among the processes of this node, in {@code [0, localWorldSize)}
 * @param worldSize number of processes in the job
 * @param localWorldSize number of processes on this node, at most {@code worldSize}
 * @param masterAddr host name or address where rank 0 hosts the rendezvous store
 * @param masterPort TCP port of the store, in {@code [1, 65535]}
 */
public record LaunchEnvironment(int rank, int localRank, int worldSize, int localWorldSize, String masterAddr, int masterPort) {

    /** Store host used when none is given and the whole job runs on this node. */
    public static final String DEFAULT_MASTER_ADDR = "127.0.0.1";

    /** Store port used when none is given (torchrun's default). */
    public static final int DEFAULT_MASTER_PORT = 29500;

    /** The launchers {@link #from(Map)} understands, in order of precedence. */
    public enum Launcher {
        /** torchrun / torch.distributed.run. */
        TORCHRUN,
        /** Slurm's srun. */
        SLURM,
        /** Open MPI's mpirun. */
        OPEN_MPI
    }

    /** Validates ranks, sizes and the store address. */
    public LaunchEnvironment {
        Objects.requireNonNull(masterAddr, "masterAddr");
        if (worldSize < 1) {
            throw new IllegalArgumentException("world size must be at least 1, got " + worldSize);
        }
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("rank " + rank + " is outside [0, " + worldSize + ")");
        }
        if (localWorldSize < 1 || localWorldSize > worldSize) {
            throw new IllegalArgumentException("local world size " + localWorldSize + " is outside [1, " + worldSize + "]");
        }
        if (localRank < 0 || localRank >= localWorldSize) {
            throw new IllegalArgumentException("local rank " + localRank + " is outside [0, " + localWorldSize + ")");
        }
        if (masterAddr.isBlank()) {
            throw new IllegalArgumentException("master address is blank");
        }
        if (masterPort < 1 || masterPort > 65535) {
            throw new IllegalArgumentException("master port " + masterPort + " is outside [1, 65535]");
        }
    }

    /**
     * A job of one process: rank 0 of 1 with the default store address.
     *
     * @return the environment
     */
    public static LaunchEnvironment standalone() {
        return new LaunchEnvironment(0, 0, 1, 1, DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT);
    }

    /**
     * Rank {@code rank} of a job whose ranks all run on this machine, with its store on loopback.
     *
     * @param rank global rank
     * @param worldSize number of processes
     * @param masterPort the store's port
     * @return the environment
     */
    public static LaunchEnvironment loopback(int rank, int worldSize, int masterPort) {
        return new LaunchEnvironment(rank, rank, worldSize, worldSize, DEFAULT_MASTER_ADDR, masterPort);
    }

    /**
     * Reads this process's environment variables.
     *
     * @return the environment
     * @throws IllegalArgumentException if no launcher's variables are set or one is invalid
     */
    public static LaunchEnvironment fromSystem() {
        return from(System.getenv());
    }

    /**
     * Which launcher's variables {@code vars} holds, by the precedence above.
     *
     * @param vars environment variables
     * @return the launcher, or empty if none is recognised
     */
    public static Optional<Launcher> detect(Map<String, String> vars) {
        if (vars.containsKey("RANK") || vars.containsKey("WORLD_SIZE")) {
            return Optional.of(Launcher.TORCHRUN);
        }
        if (vars.containsKey("SLURM_PROCID")) {
            return Optional.of(Launcher.SLURM);
        }
        if (vars.containsKey("OMPI_COMM_WORLD_RANK")) {
            return Optional.of(Launcher.OPEN_MPI);
        }
        return Optional.empty();
    }

    /**
     * Reads the variables of the launcher {@link #detect} finds.
     *
     * @param vars environment variables (e.g. {@link System#getenv()})
     * @return the environment
     * @throws IllegalArgumentException naming the variable and its value if one is missing or invalid,
     *         or listing what was looked for if no launcher is recognised
     */
    public static LaunchEnvironment from(Map<String, String> vars) {
        Launcher launcher = detect(vars).orElseThrow(() -> new IllegalArgumentException(
                "no launcher environment found: expected RANK and WORLD_SIZE (torchrun), SLURM_PROCID (Slurm) "
                        + "or OMPI_COMM_WORLD_RANK (Open MPI)"));
        Variables v = new Variables(vars);
        return switch (launcher) {
            case TORCHRUN -> torchrun(v);
            case SLURM -> slurm(v);
            case OPEN_MPI -> openMpi(v);
        };
    }

    /** @return true if every rank of the job runs on this node */
    public boolean isSingleNode() {
        return localWorldSize == worldSize;
    }

    private static LaunchEnvironment torchrun(Variables v) {
        int worldSize = v.positive("WORLD_SIZE");
        int rank = v.index("RANK", worldSize, "WORLD_SIZE");
        int localRank;
        int localWorldSize;
        if (!v.has("LOCAL_RANK") && !v.has("LOCAL_WORLD_SIZE")) {
            localRank = rank;
            localWorldSize = worldSize;
        } else {
            localWorldSize = v.positive("LOCAL_WORLD_SIZE");
            v.atMost("LOCAL_WORLD_SIZE", localWorldSize, "WORLD_SIZE", worldSize);
            localRank = v.index("LOCAL_RANK", localWorldSize, "LOCAL_WORLD_SIZE");
        }
        return new LaunchEnvironment(rank, localRank, worldSize, localWorldSize,
                v.masterAddr(localWorldSize == worldSize, null), v.masterPort(DEFAULT_MASTER_PORT));
    }

    private static LaunchEnvironment slurm(Variables v) {
        String sizeVar = v.has("SLURM_NTASKS") || !v.has("SLURM_NPROCS") ? "SLURM_NTASKS" : "SLURM_NPROCS";
        int worldSize = v.positive(sizeVar);
        int rank = v.index("SLURM_PROCID", worldSize, sizeVar);
        int localWorldSize = slurmTasksOnThisNode(v, worldSize, sizeVar);
        int localRank = v.index("SLURM_LOCALID", localWorldSize, "the tasks on this node");
        String nodeListVar = v.has("SLURM_JOB_NODELIST") || !v.has("SLURM_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
        String firstHost = null;
        if (v.has(nodeListVar)) {
            try {
                firstHost = SlurmNodeList.first(v.get(nodeListVar));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(nodeListVar + "=" + v.get(nodeListVar) + " is invalid: " + e.getMessage(), e);
            }
        }
        int port = DEFAULT_MASTER_PORT;
        if (v.has("SLURM_JOB_ID")) {
            port = 10_000 + (int) (v.nonNegativeLong("SLURM_JOB_ID") % 10_000);
        }
        return new LaunchEnvironment(rank, localRank, worldSize, localWorldSize,
                v.masterAddr(localWorldSize == worldSize, firstHost), v.masterPort(port));
    }

    private static LaunchEnvironment openMpi(Variables v) {
        int worldSize = v.positive("OMPI_COMM_WORLD_SIZE");
        int rank = v.index("OMPI_COMM_WORLD_RANK", worldSize, "OMPI_COMM_WORLD_SIZE");
        int localWorldSize = v.positive("OMPI_COMM_WORLD_LOCAL_SIZE");
        v.atMost("OMPI_COMM_WORLD_LOCAL_SIZE", localWorldSize, "OMPI_COMM_WORLD_SIZE", worldSize);
        int localRank = v.index("OMPI_COMM_WORLD_LOCAL_RANK", localWorldSize, "OMPI_COMM_WORLD_LOCAL_SIZE");
        return new LaunchEnvironment(rank, localRank, worldSize, localWorldSize,
                v.masterAddr(localWorldSize == worldSize, null), v.masterPort(DEFAULT_MASTER_PORT));
    }

    private static int slurmTasksOnThisNode(Variables v, int worldSize, String sizeVar) {
        int tasks;
        String source;
        if (v.has("SLURM_NTASKS_PER_NODE")) {
            source = "SLURM_NTASKS_PER_NODE";
            tasks = v.positive(source);
        } else if (v.has("SLURM_TASKS_PER_NODE")) {
            source = "SLURM_TASKS_PER_NODE";
            List<Integer> perNode = tasksPerNode(v.get(source));
            int node = v.index("SLURM_NODEID", perNode.size(), "the nodes listed in SLURM_TASKS_PER_NODE=" + v.get(source));
            tasks = perNode.get(node);
        } else {
            String nodesVar = v.has("SLURM_NNODES") || !v.has("SLURM_JOB_NUM_NODES") ? "SLURM_NNODES" : "SLURM_JOB_NUM_NODES";
            if (!v.has(nodesVar)) {
                throw new IllegalArgumentException("cannot tell how many Slurm tasks run on this node: none of "
                        + "SLURM_NTASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_NNODES is set");
            }
            int nodes = v.positive(nodesVar);
            if (worldSize % nodes != 0) {
                throw new IllegalArgumentException(sizeVar + "=" + worldSize + " tasks do not spread evenly over "
                        + nodesVar + "=" + nodes + " nodes; set SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE");
            }
            source = nodesVar;
            tasks = worldSize / nodes;
        }
        v.atMost(source, tasks, sizeVar, worldSize);
        return tasks;
    }

    /** Parses Slurm's {@code 4(x2),3} into {@code [4, 4, 3]}. */
    static List<Integer> tasksPerNode(String value) {
        List<Integer> counts = new ArrayList<>();
        for (String part : value.split(",", -1)) {
            String count = part;
            int repeat = 1;
            int paren = part.indexOf('(');
            if (paren >= 0) {
                if (!part.endsWith(")") || !part.startsWith("x", paren + 1)) {
                    throw new IllegalArgumentException("SLURM_TASKS_PER_NODE=" + value + " is invalid: expected entries like 4 or 4(x2)");
                }
                count = part.substring(0, paren);
                repeat = Variables.parsePositive("SLURM_TASKS_PER_NODE", value, part.substring(paren + 2, part.length() - 1));
            }
            int c = Variables.parsePositive("SLURM_TASKS_PER_NODE", value, count);
            if (counts.size() + repeat > 1_000_000) {
                throw new IllegalArgumentException("SLURM_TASKS_PER_NODE=" + value + " lists more than a million nodes");
            }
            for (int i = 0; i < repeat; i++) {
                counts.add(c);
            }
        }
        return counts;
    }

    /** Typed reads of environment variables whose errors name the variable and its value. */
    private record Variables(Map<String, String> vars) {
        boolean has(String name) {
            String value = vars.get(name);
            return value != null && !value.isBlank();
        }

        String get(String name) {
            if (!has(name)) {
                throw new IllegalArgumentException(name + " is not set");
            }
            return vars.get(name).trim();
        }

        int positive(String name) {
            return parsePositive(name, get(name), get(name));
        }

        long nonNegativeLong(String name) {
            String value = get(name);
            try {
                long n = Long.parseLong(value);
                if (n >= 0) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException(name + "=" + value + " is not a non-negative integer");
        }

        /** A value in {@code [0, bound)}, where {@code bound} is described by {@code boundName}. */
        int index(String name, int bound, String boundName) {
            String value = get(name);
            int n;
            try {
                n = Integer.parseInt(value);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException(name + "=" + value + " is not an integer", e);
            }
            if (n < 0 || n >= bound) {
                throw new IllegalArgumentException(name + "=" + value + " is outside [0, " + bound + "), the range given by " + boundName);
            }
            return n;
        }

        void atMost(String name, int value, String boundName, int bound) {
            if (value > bound) {
                throw new IllegalArgumentException(name + "=" + value + " exceeds " + boundName + "=" + bound);
            }
        }

        String masterAddr(boolean singleNode, String fallback) {
            if (has("MASTER_ADDR")) {
                return get("MASTER_ADDR");
            }
            if (fallback != null) {
                return fallback;
            }
            if (singleNode) {
                return DEFAULT_MASTER_ADDR;
            }
            throw new IllegalArgumentException("MASTER_ADDR is not set and the job spans several nodes, "
                    + "so rank 0's address cannot be guessed");
        }

        int masterPort(int fallback) {
            if (!has("MASTER_PORT")) {
                return fallback;
            }
            String value = get("MASTER_PORT");
            try {
                int port = Integer.parseInt(value);
                if (port >= 1 && port <= 65535) {
                    return port;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException("MASTER_PORT=" + value + " is not a port in [1, 65535]");
        }

        static int parsePositive(String name, String value, String digits) {
            try {
                int n = Integer.parseInt(digits.trim());
                if (n > 0) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException(name + "=" + value + " is not a positive integer");
        }
    }
}
