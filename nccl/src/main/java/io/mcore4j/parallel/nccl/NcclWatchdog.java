package io.mcore4j.parallel.nccl;

import static org.bytedeco.cuda.global.cudart.cudaSetDevice;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.locks.LockSupport;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The thread that lets collectives return without waiting on the host: it polls, for every
 * communicator of one backend, the oldest work enqueued without a wait, retires what has finished,
 * and aborts a communicator whose work failed or outlived the timeout (see {@link NcclComm#watch}).
 * The thread is a daemon; it polls every {@value #POLL_MICROS} µs while work is outstanding and
 * every {@value #IDLE_MICROS} µs otherwise. Owned by the backend, which stops it before destroying
 * its communicators.
 */
final class NcclWatchdog implements AutoCloseable {
    private static final long POLL_MICROS = 200;
    private static final long IDLE_MICROS = 2_000;
    private static final Logger LOG = LoggerFactory.getLogger(NcclWatchdog.class);

    private final List<NcclComm> comms = new CopyOnWriteArrayList<>();
    private final Thread thread;
    private volatile boolean running = true;

    /**
     * Starts the thread.
     *
     * @param device CUDA device of every communicator it will watch
     * @param name thread name
     */
    NcclWatchdog(int device, String name) {
        thread = new Thread(() -> loop(device), name);
        thread.setDaemon(true);
        thread.start();
    }

    /** @param comm a communicator to watch from now until it is closed */
    void watch(NcclComm comm) {
        comms.add(comm);
    }

    private void loop(int device) {
        cudaSetDevice(device);
        while (running) {
            boolean busy = false;
            long now = System.nanoTime();
            for (NcclComm c : comms) {
                try {
                    busy |= c.watch(now);
                } catch (RuntimeException e) {
                    LOG.error("NCCL watchdog: polling a communicator failed", e);
                }
            }
            LockSupport.parkNanos((busy ? POLL_MICROS : IDLE_MICROS) * 1_000);
        }
    }

    /** Stops the thread and waits for it to finish its pass. Idempotent. */
    @Override
    public void close() {
        running = false;
        LockSupport.unpark(thread);
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
