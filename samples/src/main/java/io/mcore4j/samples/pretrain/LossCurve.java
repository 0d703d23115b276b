package io.mcore4j.samples.pretrain;

import java.awt.BasicStroke;
import java.awt.Color;
import java.awt.Font;
import java.awt.Graphics2D;
import java.awt.RenderingHints;
import java.awt.image.BufferedImage;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import javax.imageio.ImageIO;

/**
 * The PNG loss curve, drawn with Java2D. Kept apart from {@link MetricsLog} so that runtimes
 * without the {@code java.desktop} module (trimmed runtimes on GPU hosts) never load AWT classes.
 */
final class LossCurve {
    private LossCurve() {}

    static void draw(List<double[]> trainLoss, List<double[]> validLoss, Path out) {
        int w = 800;
        int h = 480;
        BufferedImage img = new BufferedImage(w, h, BufferedImage.TYPE_INT_RGB);
        Graphics2D g = img.createGraphics();
        g.setRenderingHint(RenderingHints.KEY_ANTIALIASING, RenderingHints.VALUE_ANTIALIAS_ON);
        g.setColor(Color.WHITE);
        g.fillRect(0, 0, w, h);
        int left = 70;
        int right = w - 20;
        int top = 40;
        int bottom = h - 50;
        double maxIt = 1;
        double lo = Double.MAX_VALUE;
        double hi = -Double.MAX_VALUE;
        for (List<double[]> series : List.of(trainLoss, validLoss)) {
            for (double[] p : series) {
                maxIt = Math.max(maxIt, p[0]);
                if (Double.isFinite(p[1])) {
                    lo = Math.min(lo, p[1]);
                    hi = Math.max(hi, p[1]);
                }
            }
        }
        if (lo > hi) {
            lo = 0;
            hi = 1;
        }
        if (hi - lo < 1e-9) {
            hi = lo + 1;
        }
        g.setColor(Color.BLACK);
        g.setFont(new Font(Font.SANS_SERIF, Font.PLAIN, 14));
        g.drawString("mcore4j pretrain-gpt: loss", left, 24);
        g.drawLine(left, bottom, right, bottom);
        g.drawLine(left, top, left, bottom);
        for (int i = 0; i <= 4; i++) {
            double value = lo + (hi - lo) * i / 4;
            int y = bottom - (bottom - top) * i / 4;
            g.drawString(String.format(Locale.ROOT, "%.3f", value), 8, y + 5);
            g.drawString(String.format(Locale.ROOT, "%d", Math.round(maxIt * i / 4)), left + (right - left) * i / 4 - 8, bottom + 20);
        }
        g.drawString("iteration", (left + right) / 2 - 30, h - 10);
        plot(g, trainLoss, new Color(31, 119, 180), maxIt, lo, hi, left, right, top, bottom);
        plot(g, validLoss, new Color(214, 39, 40), maxIt, lo, hi, left, right, top, bottom);
        g.setColor(new Color(31, 119, 180));
        g.drawString("train", right - 120, top);
        g.setColor(new Color(214, 39, 40));
        g.drawString("validation", right - 70, top);
        g.dispose();
        try {
            ImageIO.write(img, "png", out.toFile());
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write " + out, e);
        }
    }

    private static void plot(Graphics2D g, List<double[]> series, Color color, double maxIt, double lo, double hi,
                             int left, int right, int top, int bottom) {
        g.setColor(color);
        g.setStroke(new BasicStroke(2f));
        int px = -1;
        int py = -1;
        for (double[] p : series) {
            int x = left + (int) Math.round((right - left) * p[0] / maxIt);
            int y = bottom - (int) Math.round((bottom - top) * (p[1] - lo) / (hi - lo));
            if (px >= 0) {
                g.drawLine(px, py, x, y);
            }
            g.fillOval(x - 2, y - 2, 4, 4);
            px = x;
            py = y;
        }
    }

}
