package io.mcore4j.parallel.rendezvous;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A slowloris attack on a handshake port, for tests: connections from 127.0.0.1 that send a
 * valid-looking start of a client's handshake answer (the magic number, the purpose, a rank...) one
 * byte per connection every period, and never its end (after 60 bytes a connection just stalls). A
 * connection the server closes is opened again when its next byte fails, so the attack keeps its
 * number of connections. One daemon thread does all the writing.
 * Owns its sockets and thread until {@link #close()}.
 */
public final class SlowClients implements AutoCloseable {
    /** The client's answer is 61 bytes; these connections stop one short of it. */
    private static final int PREFIX_BYTES = 60;

    private final int port;
    private final byte[] prefix;
    private final long periodMillis;
    private final List<Socket> sockets = new ArrayList<>();
    private final int[] sent;
    private final AtomicInteger closedByServer = new AtomicInteger();
    private final Thread writer;
    private volatile boolean stopped;

    private SlowClients(int port, byte purpose, int count, Duration period) throws IOException {
        this.port = port;
        this.periodMillis = period.toMillis();
        ByteBuffer b = ByteBuffer.allocate(PREFIX_BYTES);
        b.putInt(Handshake.MAGIC).put(purpose).putInt(1).putInt(2);
        this.prefix = b.array();
        this.sent = new int[count];
        for (int i = 0; i < count; i++) {
            sockets.add(connect());
        }
        writer = new Thread(this::writeLoop, "slow-clients-" + port);
        writer.setDaemon(true);
        writer.start();
    }

    /**
     * Opens {@code count} connections to {@code 127.0.0.1:port} and starts trickling.
     *
     * @param purpose {@link Handshake#STORE} or {@link Handshake#PEER}, the fifth byte sent
     * @param period how long each connection waits between two bytes
     */
    public static SlowClients open(int port, byte purpose, int count, Duration period) throws IOException {
        return new SlowClients(port, purpose, count, period);
    }

    /** @return how many of these connections the server has closed so far */
    public int closedByServer() {
        return closedByServer.get();
    }

    /** Stops the attack and closes every connection. */
    @Override
    public void close() throws InterruptedException {
        stopped = true;
        writer.interrupt();
        writer.join(5_000);
        synchronized (sockets) {
            for (Socket s : sockets) {
                closeQuietly(s);
            }
        }
    }

    private Socket connect() throws IOException {
        Socket s = new Socket(InetAddress.getLoopbackAddress(), port);
        s.setTcpNoDelay(true);
        return s;
    }

    private void writeLoop() {
        while (!stopped) {
            for (int i = 0; i < sent.length && !stopped; i++) {
                Socket s;
                synchronized (sockets) {
                    s = sockets.get(i);
                }
                try {
                    if (sent[i] < PREFIX_BYTES) {
                        OutputStream out = s.getOutputStream();
                        out.write(prefix[sent[i]++]);
                        out.flush();
                    }
                } catch (IOException e) {
                    closedByServer.incrementAndGet();
                    closeQuietly(s);
                    try {
                        Socket again = connect();
                        synchronized (sockets) {
                            sockets.set(i, again);
                        }
                        sent[i] = 0;
                    } catch (IOException gone) {
                        return; // the server is gone
                    }
                }
            }
            try {
                Thread.sleep(periodMillis);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException e) {
            // already broken: nothing to release
        }
    }
}
