package io.mcore4j.core.nn;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;

/**
 * An ordered list of child modules, keyed by index ({@code "0."}, {@code "1."}, ...) or by an index
 * the caller gives (a global layer number, so that keys do not depend on how layers are split across
 * pipeline stages). Like PyTorch's {@code nn.ModuleList}: it holds and names its children; whoever
 * owns it decides how they are called.
 *
 * @param <M> the children's type
 */
public final class ModuleList<M extends Module> extends AbstractModule implements Iterable<M> {
    private final List<M> modules = new ArrayList<>();

    /** An empty list. */
    public ModuleList() {}

    /**
     * Appends {@code module} under the key of its position ({@code size() + "."}).
     *
     * @param module the child
     * @return {@code module}
     */
    public M add(M module) {
        return put(modules.size(), module);
    }

    /**
     * Appends {@code module} under the key {@code index + "."}.
     *
     * @param index the child's key index, e.g. a global layer number
     * @param module the child
     * @return {@code module}
     * @throws IllegalArgumentException if the index is negative
     */
    public M put(int index, M module) {
        if (index < 0) {
            throw new IllegalArgumentException("module index " + index + " must not be negative");
        }
        registerModule(index + ".", module);
        modules.add(module);
        return module;
    }

    /**
     * @param position position in the list (not the key index)
     * @return the child at that position
     */
    public M get(int position) {
        return modules.get(position);
    }

    /** @return the number of children */
    public int size() {
        return modules.size();
    }

    /** @return the children in order, unmodifiable */
    public List<M> asList() {
        return Collections.unmodifiableList(modules);
    }

    @Override
    public Iterator<M> iterator() {
        return asList().iterator();
    }
}
