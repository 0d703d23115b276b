package io.mcore4j.data.chat;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.ExtendedSyntaxBuilder;
import com.hubspot.jinjava.el.JinjavaInterpreterResolver;
import com.hubspot.jinjava.el.TruthyTypeConverter;
import com.hubspot.jinjava.el.ext.AstNamedParameter;
import com.hubspot.jinjava.el.ext.ExtendedParser;
import com.hubspot.jinjava.el.ext.NamedParameterOperator;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.InterpretException;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.exptest.ExpTest;
import com.hubspot.jinjava.lib.filter.Filter;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import com.hubspot.jinjava.tree.Node;
import jinjava.de.odysseus.el.ExpressionFactoryImpl;
import jinjava.de.odysseus.el.tree.TreeBuilder;
import jinjava.de.odysseus.el.tree.impl.Builder;
import jinjava.de.odysseus.el.tree.impl.Parser;
import jinjava.de.odysseus.el.tree.impl.Scanner;
import jinjava.de.odysseus.el.tree.impl.Scanner.ScanException;
import jinjava.de.odysseus.el.tree.impl.ast.AstUnary;
import jinjava.de.odysseus.el.tree.impl.ast.AstIdentifier;
import jinjava.de.odysseus.el.tree.impl.ast.AstNode;
import jinjava.javax.el.CompositeELResolver;
import jinjava.javax.el.ExpressionFactory;

import java.time.LocalDateTime;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Jinja dialect of Hugging Face chat templates, on HubSpot's jinjava: the environment transformers'
 * {@code apply_chat_template} renders in ({@code trim_blocks}, {@code lstrip_blocks}, {@code raise_exception},
 * {@code strftime_now}, a {@code tojson} that is Python's {@code json.dumps}, loop controls) and the Python
 * behaviour templates rely on that jinjava lacks or differs in: Python's string and dict methods
 * ({@link PythonMethods}), {@code for ... in ... if ...} loop filters, keyword arguments whose values are
 * expressions ({@code namespace(n=messages|length - 1)}), {@code [::-1]}, Python's {@code str()} for the
 * {@code string} filter and Python's notion of iterable (strings are). Rendering one template is not safe from
 * several threads at once.
 *
 * <p>What jinjava cannot render is an error, never a silent difference: {@link #render} throws
 * {@link ChatTemplateException} naming the template, the line and the construct. A template is parsed once
 * ({@link #parse}) and its tree rendered for each conversation.
 */
final class ChatJinja {
    /** The context variable holding this render's {@link MessageLoopTag.Tracker}; absent when not tracking. */
    static final String TRACKER = "__mcore4j_chat_tracker";

    private static final Pattern REVERSED = Pattern.compile("\\[\\s*:\\s*:\\s*-\\s*1\\s*\\]");

    private final Jinjava jinjava;

    ChatJinja() {
        CompositeELResolver resolver = new CompositeELResolver();
        resolver.add(new PythonMethods());
        resolver.add(JinjavaInterpreterResolver.DEFAULT_RESOLVER_READ_ONLY);
        // Jinja's whitespace control: "{{-" and "{#-" strip as "{%-" does
        LegacyOverrides python = LegacyOverrides.newBuilder().withUseTrimmingForNotesAndExpressions(true).build();
        JinjavaConfig config = JinjavaConfig.newBuilder().withTrimBlocks(true).withLstripBlocks(true)
                .withLegacyOverrides(python).withElResolver(resolver).build();
        jinjava = new PythonJinjava(config);
        jinjava.registerTag(new MessageLoopTag());
        jinjava.registerTag(new GenerationTag());
        jinjava.registerFilter(new ToJson());
        jinjava.registerFilter(new PythonString());
        jinjava.registerExpTest(new PythonIterable("iterable"));
        jinjava.registerExpTest(new PythonIterable("sequence"));
        jinjava.registerFunction(new ELFunctionDefinition("", "raise_exception", ChatJinja.class, "raiseException",
                String.class));
        jinjava.registerFunction(new ELFunctionDefinition("", "strftime_now", ChatJinja.class, "strftimeNow",
                String.class));
    }

    /**
     * Parses a template once, for {@link #render} to render many times.
     *
     * @param source the template
     * @param origin where it came from, for messages
     * @return the parsed template
     * @throws ChatTemplateException if jinjava cannot parse it
     */
    Node parse(String source, String origin) {
        JinjavaInterpreter interpreter = jinjava.newInterpreter();
        JinjavaInterpreter.pushCurrent(interpreter);
        try {
            Node root = interpreter.parse(rewrite(source));
            check(interpreter.getErrorsCopy(), origin);
            return root;
        } finally {
            JinjavaInterpreter.popCurrent();
        }
    }

    /**
     * Renders a parsed template.
     *
     * @param root the template, from {@link #parse}
     * @param origin where it came from, for messages
     * @param variables the template's variables
     * @return the text
     * @throws ChatTemplateException if the template raised an exception or jinjava cannot render it
     */
    String render(Node root, String origin, Map<String, Object> variables) {
        Map<String, Object> bindings = new HashMap<>(variables);
        // transformers defines strftime_now, and templates test "strftime_now is defined" before calling it
        bindings.putIfAbsent("strftime_now", "strftime_now");
        JinjavaConfig config = jinjava.getGlobalConfig();
        Context context = new Context(jinjava.getGlobalContextCopy(), bindings, config.getDisabled());
        JinjavaInterpreter interpreter = config.getInterpreterFactory().newInstance(jinjava, context, config);
        JinjavaInterpreter.pushCurrent(interpreter);
        try {
            String output = interpreter.render(root);
            check(interpreter.getErrorsCopy(), origin);
            return output;
        } catch (InterpretException e) {
            throw failure(TemplateError.fromSyntaxError(e), origin);
        } finally {
            JinjavaInterpreter.popCurrent();
        }
    }

    private static void check(List<TemplateError> errors, String origin) {
        for (TemplateError error : errors) {
            if (error.getSeverity() == TemplateError.ErrorType.FATAL) {
                throw failure(error, origin);
            }
        }
    }

    /** Python's slice {@code x[::-1]}, which jinjava's parser lacks, as {@code x|reverse} (the same value). */
    private static String rewrite(String source) {
        StringBuilder out = new StringBuilder();
        Matcher tags = Pattern.compile("\\{[{%].*?[}%]\\}", Pattern.DOTALL).matcher(source);
        int from = 0;
        while (tags.find()) {
            out.append(source, from, tags.start()).append(REVERSED.matcher(tags.group()).replaceAll("|reverse"));
            from = tags.end();
        }
        return out.append(source.substring(from)).toString();
    }

    private static ChatTemplateException failure(TemplateError error, String origin) {
        for (Throwable t = error.getException(); t != null; t = t.getCause()) {
            if (t instanceof RaisedException raised) {
                return new ChatTemplateException(origin + " raised: " + raised.getMessage(), raised);
            }
        }
        String construct = error.getFieldName() == null || error.getFieldName().isBlank() ? ""
                : " in '" + error.getFieldName().trim() + "'";
        return new ChatTemplateException("chat template " + origin + ", line " + error.getLineno() + ": jinjava cannot"
                + " render" + construct + ": " + error.getMessage(), error.getException());
    }

    /** transformers' {@code raise_exception(message)}: the template refuses the conversation. */
    static String raiseException(String message) {
        throw new RaisedException(message);
    }

    /** transformers' {@code strftime_now(format)}: the local time now, formatted as Python's strftime. */
    static String strftimeNow(String format) {
        return Strftime.format(LocalDateTime.now(), format);
    }

    /** What {@code raise_exception} throws, found again in jinjava's error. */
    static final class RaisedException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        RaisedException(String message) {
            super(message);
        }
    }

    /** jinjava with keyword arguments parsed at the lowest precedence, as in Jinja ({@link PythonSyntax}). */
    private static final class PythonJinjava extends Jinjava {
        private final ExpressionFactory expressions;

        PythonJinjava(JinjavaConfig config) {
            super(config);
            Properties properties = new Properties();
            properties.setProperty(TreeBuilder.class.getName(), ExtendedSyntaxBuilder.class.getName());
            expressions = new ExpressionFactoryImpl(properties, new TruthyTypeConverter()) {
                @Override
                protected TreeBuilder createTreeBuilder(Properties p, Builder.Feature... features) {
                    return new PythonSyntax(features);
                }
            };
        }

        @Override
        public ExpressionFactory getExpressionFactory() {
            return expressions;
        }
    }

    /**
     * jinjava's syntax with Jinja's precedence in two places: {@code name=value} binds looser than every operator
     * (jinjava binds it as tightly as {@code +}, so {@code n=messages|length - 1} would be
     * {@code (n=messages|length) - 1}), and {@code not} looser than comparisons ({@code not x|length == 1} is
     * {@code not (x|length == 1)}, where jinjava reads {@code (not x|length) == 1}).
     */
    private static final class PythonSyntax extends ExtendedSyntaxBuilder {
        private static final long serialVersionUID = 1L;

        PythonSyntax(Builder.Feature... features) {
            super(features);
        }

        @Override
        protected Parser createParser(String expression) {
            return new ExtendedParser(this, expression) {
                {
                    putExtensionHandler(NamedParameterOperator.TOKEN, new ExtensionHandler(ExtensionPoint.OR) {
                        @Override
                        public AstNode createAstNode(AstNode... children) {
                            if (!(children[0] instanceof AstIdentifier name)) {
                                throw new IllegalArgumentException("expected a name before '=', found " + children[0]);
                            }
                            return new AstNamedParameter(name, children[1]);
                        }
                    });
                }

                @Override
                protected AstNode unary(boolean required) throws ScanException, ParseException {
                    if (getToken().getSymbol() == Scanner.Symbol.NOT) {
                        consumeToken();
                        return createAstUnary(eq(true), AstUnary.NOT);
                    }
                    return super.unary(required);
                }
            };
        }
    }

    /** transformers' {@code tojson}: {@code json.dumps(x, ensure_ascii=False, indent=..., sort_keys=...)}. */
    private static final class ToJson implements Filter {
        @Override
        public String getName() {
            return "tojson";
        }

        @Override
        public Object filter(Object var, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
            Object indent = kwargs.getOrDefault("indent", args.length > 0 ? args[0] : null);
            Object sort = kwargs.getOrDefault("sort_keys", Boolean.FALSE);
            return PythonValues.json(var, indent == null ? null : ((Number) indent).intValue(), Boolean.TRUE.equals(sort));
        }

        @Override
        public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
            return filter(var, interpreter, args, Map.of());
        }
    }

    /** Jinja's {@code string} filter: Python's {@code str()} ({@code {'a': 1}}, {@code True}, {@code None}). */
    private static final class PythonString implements Filter {
        @Override
        public String getName() {
            return "string";
        }

        @Override
        public Object filter(Object var, JinjavaInterpreter interpreter, String... args) {
            return PythonValues.str(var);
        }
    }

    /** Jinja's {@code iterable} and {@code sequence} tests, true for strings and dicts as in Python. */
    private static final class PythonIterable implements ExpTest {
        private final String name;

        PythonIterable(String name) {
            this.name = name;
        }

        @Override
        public String getName() {
            return name;
        }

        @Override
        public boolean evaluate(Object var, JinjavaInterpreter interpreter, Object... args) {
            return var instanceof CharSequence || var instanceof Iterable<?> || var instanceof Map<?, ?>
                    || var != null && var.getClass().isArray();
        }
    }
}
