package io.mcore4j.parallel.launch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.mcore4j.parallel.launch.LaunchEnvironment.Launcher;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.junit.jupiter.api.Test;

class LaunchEnvironmentTest {

    private static Map<String, String> vars(String... kv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put(kv[i], kv[i + 1]);
        }
        return m;
    }

    private static void assertFails(Map<String, String> vars, String... fragments) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LaunchEnvironment.from(vars));
        for (String f : fragments) {
            assertTrue(e.getMessage().contains(f), "'" + e.getMessage() + "' should mention '" + f + "'");
        }
    }

    @Test
    void torchrunWithEveryVariable() {
        LaunchEnvironment env = LaunchEnvironment.from(vars("RANK", "5", "LOCAL_RANK", "1", "WORLD_SIZE", "8",
                "LOCAL_WORLD_SIZE", "4", "MASTER_ADDR", "node01", "MASTER_PORT", "1234"));
        assertEquals(new LaunchEnvironment(5, 1, 8, 4, "node01", 1234), env);
        assertEquals(false, env.isSingleNode());
    }

    @Test
    void torchrunWithoutLocalVariablesMeansOneNodeAndDefaultStore() {
        LaunchEnvironment env = LaunchEnvironment.from(vars("RANK", "2", "WORLD_SIZE", "4"));
        assertEquals(new LaunchEnvironment(2, 2, 4, 4, "127.0.0.1", 29500), env);
        assertTrue(env.isSingleNode());
    }

    @Test
    void torchrunTakesPrecedenceOverSlurmAndMpi() {
        Map<String, String> v = vars("RANK", "1", "WORLD_SIZE", "2", "MASTER_PORT", "4000",
                "SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "1",
                "OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1");
        assertEquals(Optional.of(Launcher.TORCHRUN), LaunchEnvironment.detect(v));
        assertEquals(new LaunchEnvironment(1, 1, 2, 2, "127.0.0.1", 4000), LaunchEnvironment.from(v));
    }

    @Test
    void torchrunErrorsNameTheVariableAndValue() {
        assertFails(vars("RANK", "abc", "WORLD_SIZE", "4"), "RANK=abc", "not an integer");
        assertFails(vars("RANK", "4", "WORLD_SIZE", "4"), "RANK=4", "outside [0, 4)", "WORLD_SIZE");
        assertFails(vars("RANK", "0"), "WORLD_SIZE is not set");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "0"), "WORLD_SIZE=0", "not a positive integer");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "0"), "LOCAL_WORLD_SIZE is not set");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2"), "LOCAL_RANK=2");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "8"),
                "LOCAL_WORLD_SIZE=8 exceeds WORLD_SIZE=4");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "MASTER_PORT", "70000"), "MASTER_PORT=70000");
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "MASTER_PORT", "http"), "MASTER_PORT=http");
        // two nodes and no store address: guessing loopback would hang the other node
        assertFails(vars("RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2"), "MASTER_ADDR is not set");
    }

    @Test
    void slurmWithTasksPerNodeAndNodeList() {
        LaunchEnvironment env = LaunchEnvironment.from(vars("SLURM_PROCID", "5", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
                "SLURM_NTASKS_PER_NODE", "4", "SLURM_JOB_NODELIST", "gpu[03-04]", "SLURM_JOB_ID", "123456"));
        // the port comes from the job id so that two jobs sharing a node do not collide
        assertEquals(new LaunchEnvironment(5, 1, 8, 4, "gpu03", 13456), env);
    }

    @Test
    void slurmDerivesTasksOnThisNodeFromTheCompressedTaskCounts() {
        LaunchEnvironment env = LaunchEnvironment.from(vars("SLURM_PROCID", "7", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
                "SLURM_TASKS_PER_NODE", "3(x2),2", "SLURM_NODEID", "2", "SLURM_NODELIST", "a[1,3],b5"));
        assertEquals(new LaunchEnvironment(7, 1, 8, 2, "a1", 29500), env);
        assertEquals(List.of(3, 3, 2), LaunchEnvironment.tasksPerNode("3(x2),2"));
    }

    @Test
    void slurmDerivesTasksOnThisNodeFromTheNodeCount() {
        LaunchEnvironment env = LaunchEnvironment.from(vars("SLURM_PROCID", "3", "SLURM_NTASKS", "8", "SLURM_LOCALID", "3",
                "SLURM_NNODES", "2", "SLURM_JOB_NODELIST", "n[1-2]", "MASTER_ADDR", "10.0.0.7", "MASTER_PORT", "6000"));
        assertEquals(new LaunchEnvironment(3, 3, 8, 4, "10.0.0.7", 6000), env);
    }

    @Test
    void slurmTakesPrecedenceOverMpi() {
        Map<String, String> v = vars("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "2",
                "OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2");
        assertEquals(Optional.of(Launcher.SLURM), LaunchEnvironment.detect(v));
        assertEquals(0, LaunchEnvironment.from(v).rank());
    }

    @Test
    void slurmErrorsNameTheVariableAndValue() {
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "4",
                "SLURM_JOB_NODELIST", "gpu[03-"), "SLURM_JOB_NODELIST=gpu[03-", "unclosed bracket");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_LOCALID", "0", "SLURM_NNODES", "3"),
                "SLURM_NTASKS=8", "SLURM_NNODES=3");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_LOCALID", "0"), "SLURM_NTASKS_PER_NODE");
        assertFails(vars("SLURM_PROCID", "9", "SLURM_NTASKS", "8", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "8"),
                "SLURM_PROCID=9");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "8", "SLURM_LOCALID", "4", "SLURM_NTASKS_PER_NODE", "4",
                "SLURM_JOB_NODELIST", "n[1-2]"), "SLURM_LOCALID=4");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "SLURM_TASKS_PER_NODE", "2(y2)",
                "SLURM_NODEID", "0"), "SLURM_TASKS_PER_NODE=2(y2)");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "SLURM_TASKS_PER_NODE", "2(x2)",
                "SLURM_NODEID", "2", "SLURM_JOB_NODELIST", "n[1-2]"), "SLURM_NODEID=2");
        assertFails(vars("SLURM_PROCID", "0", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "SLURM_NTASKS_PER_NODE", "4",
                "SLURM_JOB_ID", "x17"), "SLURM_JOB_ID=x17");
    }

    @Test
    void openMpi() {
        LaunchEnvironment single = LaunchEnvironment.from(vars("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "4",
                "OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "4"));
        assertEquals(new LaunchEnvironment(2, 2, 4, 4, "127.0.0.1", 29500), single);
        LaunchEnvironment multi = LaunchEnvironment.from(vars("OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "8",
                "OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "4", "MASTER_ADDR", "head", "MASTER_PORT", "7777"));
        assertEquals(new LaunchEnvironment(6, 2, 8, 4, "head", 7777), multi);
    }

    @Test
    void openMpiErrorsNameTheVariableAndValue() {
        assertFails(vars("OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "8",
                "OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "4"), "MASTER_ADDR is not set");
        assertFails(vars("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK", "0"),
                "OMPI_COMM_WORLD_LOCAL_SIZE is not set");
        assertFails(vars("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "-2"), "OMPI_COMM_WORLD_SIZE=-2");
    }

    @Test
    void noLauncherIsAnErrorListingWhatWasLookedFor() {
        assertEquals(Optional.empty(), LaunchEnvironment.detect(vars("PATH", "/bin")));
        assertFails(vars("PATH", "/bin"), "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK");
    }

    @Test
    void recordValidatesItsValues() {
        assertThrows(IllegalArgumentException.class, () -> new LaunchEnvironment(4, 0, 4, 4, "h", 1));
        assertThrows(IllegalArgumentException.class, () -> new LaunchEnvironment(0, 0, 4, 4, " ", 1));
        assertThrows(IllegalArgumentException.class, () -> new LaunchEnvironment(0, 0, 4, 4, "h", 0));
        assertThrows(IllegalArgumentException.class, () -> new LaunchEnvironment(0, 2, 4, 2, "h", 1));
        assertEquals(new LaunchEnvironment(0, 0, 1, 1, "127.0.0.1", 29500), LaunchEnvironment.standalone());
        assertEquals(new LaunchEnvironment(1, 1, 3, 3, "127.0.0.1", 4242), LaunchEnvironment.loopback(1, 3, 4242));
    }
}
