package io.mcore4j.parallel.rendezvous;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;

/**
 * A process that holds a job's port (the store's, or a rank's peer port) and answers every
 * connection with a valid-looking start of a {@link Handshake} challenge, one byte per period, and
 * then zeros at the same pace for as long as the client listens: each byte comes well within any
 * per-read timeout. For tests of the dialing side's handshake deadline; loopback only. Owns its
 * port and daemon threads until {@link #close()}.
 */
public final class TricklingServer implements AutoCloseable {
    private final ServerSocket listener;
    private final byte[] challenge;
    private final long periodMillis;

    /**
     * @param purpose {@link Handshake#STORE} or {@link Handshake#PEER}
     * @param rank the rank it poses as (-1 for the store)
     * @param worldSize the world size it claims (-1 for the store)
     * @param period the pause before each byte
     */
    public TricklingServer(byte purpose, int rank, int worldSize, Duration period) throws IOException {
        this.listener = new ServerSocket(0, 8, InetAddress.getLoopbackAddress());
        this.challenge = ByteBuffer.allocate(29).putInt(Handshake.MAGIC).put(purpose).putInt(rank).putInt(worldSize).array();
        this.periodMillis = period.toMillis();
        Thread acceptor = new Thread(this::acceptLoop, "trickling-server-" + listener.getLocalPort());
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /** @return the port it holds */
    public int port() {
        return listener.getLocalPort();
    }

    @Override
    public void close() throws IOException {
        listener.close();
    }

    private void acceptLoop() {
        while (!listener.isClosed()) {
            try {
                Socket s = listener.accept();
                Thread t = new Thread(() -> trickle(s), "trickling-to-" + s.getRemoteSocketAddress());
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return; // closed
            }
        }
    }

    private void trickle(Socket s) {
        try (s) {
            OutputStream out = s.getOutputStream();
            for (int i = 0; !listener.isClosed(); i++) {
                Thread.sleep(periodMillis);
                out.write(i < challenge.length ? challenge[i] : 0);
                out.flush();
            }
        } catch (IOException | InterruptedException e) {
            // the client hung up, or the test is over
        }
    }
}
