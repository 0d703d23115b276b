package io.mcore4j.core;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.Shape;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Issue 38: a CPU machine's engine start is quiet. DJL warns "Failed to detect GPU count" when it
 * finds a CUDA runtime library but no driver; {@link Mcore4j} silences that logger only where no
 * NVIDIA driver is installed.
 */
class Mcore4jQuietCpuTest {
    @TempDir
    Path root;

    @Test
    void aDriverIsSeenByItsKernelModuleOrDeviceFilesOnLinuxOnly() throws Exception {
        assertFalse(Mcore4j.cudaDriverPresent("Linux", root), "an empty root has no driver");
        Files.createDirectories(root.resolve("proc/driver/nvidia"));
        assertFalse(Mcore4j.cudaDriverPresent("Linux", root), "the folder alone is no driver");
        Files.writeString(root.resolve("proc/driver/nvidia/version"), "NVRM version: 580.65");
        assertTrue(Mcore4j.cudaDriverPresent("Linux", root));

        Path devices = root.resolve("other");
        Files.createDirectories(devices.resolve("dev"));
        Files.createFile(devices.resolve("dev/nvidiactl"));
        assertTrue(Mcore4j.cudaDriverPresent("Linux", devices), "a container sees the driver through /dev/nvidiactl");
        Path wsl = root.resolve("wsl");
        Files.createDirectories(wsl.resolve("dev"));
        Files.createFile(wsl.resolve("dev/dxg"));
        assertTrue(Mcore4j.cudaDriverPresent("Linux", wsl), "WSL 2 reaches the GPU through /dev/dxg");

        assertFalse(Mcore4j.cudaDriverPresent("Mac OS X", root), "CUDA has no macOS driver");
        assertTrue(Mcore4j.cudaDriverPresent("Windows 11", root), "systems not inspected keep DJL's warning");
    }

    /**
     * Starts the engine in a fresh JVM, as a command line does, and reads its standard error. On a
     * machine with a CUDA runtime library and no driver (this test's purpose) DJL printed the warning
     * twice before the fix; without any CUDA library it never prints it.
     */
    @Test
    void startingTheEngineWithoutADriverPrintsNoGpuWarning() throws Exception {
        assumeFalse(Mcore4j.cudaDriverPresent(System.getProperty("os.name"), Path.of("/")),
                "this machine has an NVIDIA driver: DJL's warning is meaningful here and stays");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        List<String> command = List.of(java, "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dai.djl.pytorch.num_threads=1", "-Dai.djl.pytorch.num_interop_threads=1",
                "-cp", System.getProperty("java.class.path"), EngineStart.class.getName());
        Process child = new ProcessBuilder(command).start();
        String out = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        String err = new String(child.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the child JVM did not end");
        assertEquals(0, child.exitValue(), err);
        assertEquals("sum 6.0, gpus 0", out.strip(), err);
        assertFalse(err.contains("GPU count"), err);
        assertEquals("", err.strip(), "a CPU run's engine start prints nothing on standard error");
    }

    /** The child: mcore4j's initialisation, then an engine start, a computation and DJL's GPU count. */
    static final class EngineStart {
        private EngineStart() {}

        public static void main(String[] args) {
            try (NDManager manager = Mcore4j.newRootManager()) {
                float sum = manager.ones(new Shape(6)).sum().getFloat();
                System.out.println("sum " + sum + ", gpus " + Engine.getInstance().getGpuCount());
            }
        }
    }
}
