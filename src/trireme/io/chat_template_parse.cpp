// Parsing a chat template (io/chat_template.h) into the trees of chat_template_syntax.h.
//
// Two stages. The scanner splits the source into text and tags and applies Jinja's whitespace
// rules as Hugging Face configures them (trim_blocks, lstrip_blocks, no trailing newline kept):
//   - a tag opened with "-" ({%-, {{-, {#-) strips all whitespace before it; closed with "-"
//     (-%}, -}}, -#}) all whitespace after it;
//   - trim_blocks: one newline right after a block tag or comment is dropped;
//   - lstrip_blocks: spaces and tabs from the start of a line up to a block tag or comment are
//     dropped ({%+ keeps them);
//   - line breaks are normalized to "\n" and one final newline of the source is dropped.
// A tag's inside is cut into tokens (names, numbers, strings, operators) that a recursive-descent
// parser reads with Jinja's operator precedence.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string_view>

#include "trireme/io/chat_template_builtins.h"
#include "trireme/io/chat_template_syntax.h"
#include "trireme/io/config.h"
#include "trireme/io/utf8.h"

namespace trireme::io::jinja {

namespace {

enum class Tok { name, integer, floating, string, op, end };

struct Token {
  Tok kind;
  std::string text;  // name, operator, or a string literal's decoded value
  Json number;
  Pos pos;
};

enum class TagKind { text, output, block };

// One piece of the source: text, or the tokens of a {{ }} or {% %} tag.
struct Segment {
  TagKind kind;
  Pos pos;
  std::string text;
  std::vector<Token> tokens;  // ends with Tok::end
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Scanner {
 public:
  Scanner(const std::string& source, const std::string& origin) : origin_(origin) {
    // Line breaks normalized, one trailing newline dropped (Jinja's keep_trailing_newline=False).
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Segment> scan() {
    std::vector<Segment> out;
    size_t pos = 0;
    bool line_starting = true;  // the last tag's end consumed a newline (or nothing came yet)
    while (pos < src_.size()) {
      const size_t at = next_tag(pos);
      std::string text = src_.substr(pos, (at == std::string::npos ? src_.size() : at) - pos);
      if (at == std::string::npos) {
        push_text(out, std::move(text), pos);
        break;
      }
      const char kind = src_[at + 1];
      size_t inner = at + 2;
      const char sign = inner < src_.size() && (src_[inner] == '-' || src_[inner] == '+') ? src_[inner] : 0;
      if (sign) ++inner;
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        bool blank = line_begin < text.size();
        for (size_t i = line_begin; i < text.size() && blank; ++i) blank = is_space(text[i]);
        if (blank && (line_begin > 0 || line_starting)) text.resize(line_begin);
      }
      push_text(out, std::move(text), pos);
      size_t end = 0;
      char end_sign = 0;  // '-' or '+' before the closing marker
      if (kind == '#') {
        end = src_.find("#}", inner);
        if (end == std::string::npos) fail(at, "unterminated comment: '{#' without '#}'");
        if (end > inner && (src_[end - 1] == '-' || src_[end - 1] == '+')) end_sign = src_[end - 1];
        end += 2;
      } else {
        Segment seg{kind == '{' ? TagKind::output : TagKind::block, pos_of(at), {}, {}};
        end = tokenize_tag(seg, at, inner, kind == '{' ? '}' : '%', end_sign);
        out.push_back(std::move(seg));
      }
      // After the tag: "-" strips all whitespace, trim_blocks one newline after {% %} and {# #}.
      const size_t after = end;
      if (end_sign == '-') {
        while (end < src_.size() && is_space(src_[end])) ++end;
      } else if (kind != '{' && end_sign != '+' && end < src_.size() && src_[end] == '\n') {
        ++end;
      }
      line_starting = end > after && src_[end - 1] == '\n';
      pos = end;
    }
    return out;
  }

 private:
  const std::string& origin_;
  std::string src_;
  std::vector<size_t> line_starts_;

  Pos pos_of(size_t offset) const {
    size_t line = size_t(std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) - line_starts_.begin());
    return {int(line), int(offset - line_starts_[line - 1]) + 1};
  }
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    const Pos p = pos_of(offset);
    throw ConfigError(str_cat(origin_, " line ", p.line, " column ", p.column, ": ", what));
  }

  size_t next_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void push_text(std::vector<Segment>& out, std::string text, size_t offset) const {
    if (!text.empty()) out.push_back({TagKind::text, pos_of(offset), std::move(text), {}});
  }

  // Reads the tokens of a tag up to its end ("}}" or "%}", with a "-" or "+" before it, outside
  // brackets); returns the offset after the end.
  size_t tokenize_tag(Segment& seg, size_t open, size_t i, char closer, char& end_sign) const {
    std::vector<size_t> brackets;  // open ones: an end marker inside them belongs to the expression
    while (true) {
      while (i < src_.size() && is_space(src_[i])) ++i;
      if (i >= src_.size()) {
        if (!brackets.empty()) fail(brackets.back(), str_cat("'", src_[brackets.back()], "' is not closed"));
        fail(open, str_cat("unterminated tag: '", src_.substr(open, 2), "' without '", closer, "}'"));
      }
      if (brackets.empty()) {
        for (const char sign : {'-', '+', '\0'}) {
          const size_t at = i + (sign ? 1 : 0);
          if ((sign == 0 || src_[i] == sign) && at + 1 < src_.size() && src_[at] == closer && src_[at + 1] == '}') {
            end_sign = sign;
            seg.tokens.push_back({Tok::end, "", {}, pos_of(i)});
            return at + 2;
          }
        }
      }
      const char c = src_[i];
      const Pos p = pos_of(i);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t b = i;
        while (i < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[i])) || src_[i] == '_')) ++i;
        seg.tokens.push_back({Tok::name, src_.substr(b, i - b), {}, p});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        i = read_number(seg, i);
      } else if (c == '\'' || c == '"') {
        i = read_string(seg, i);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
                                     "=", "(", ")", "[", "]", "{", "}", ".", ",", ":", "|"};
        std::string op;
        for (const char* o : kOps)
          if (src_.compare(i, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        if (op.empty()) fail(i, str_cat("unexpected character '", c, "' in a tag"));
        if (op == "(" || op == "[" || op == "{") brackets.push_back(i);
        if (op == ")" || op == "]" || op == "}") {
          if (brackets.empty()) fail(i, str_cat("unexpected '", op, "'"));
          const char want = src_[brackets.back()] == '(' ? ')' : src_[brackets.back()] == '[' ? ']' : '}';
          if (op[0] != want) fail(i, str_cat("expected '", want, "', got '", op, "'"));
          brackets.pop_back();
        }
        seg.tokens.push_back({Tok::op, op, {}, p});
        i += op.size();
      }
    }
  }

  size_t read_number(Segment& seg, size_t i) const {
    const size_t b = i;
    while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) ++i;
    bool is_float = false;
    if (i + 1 < src_.size() && src_[i] == '.' && std::isdigit(static_cast<unsigned char>(src_[i + 1]))) {
      is_float = true;
      ++i;
      while (i < src_.size() && std::isdigit(static_cast<unsigned char>(src_[i]))) ++i;
    }
    const std::string digits = src_.substr(b, i - b);
    Token t{is_float ? Tok::floating : Tok::integer, digits, {}, pos_of(b)};
    try {
      t.number = is_float ? Json(std::stod(digits)) : Json(int64_t(std::stoll(digits)));
    } catch (const std::exception&) {
      fail(b, str_cat("number out of range: ", digits));
    }
    seg.tokens.push_back(std::move(t));
    return i;
  }

  // A quoted string with Python's escapes (\n \t \r \\ \' \" \xNN \uNNNN \UNNNNNNNN); an
  // unknown escape keeps its backslash, as in Python.
  size_t read_string(Segment& seg, size_t i) const {
    const size_t open = i;
    const char quote = src_[i++];
    std::string value;
    while (true) {
      if (i >= src_.size()) fail(open, "unterminated string literal");
      const char c = src_[i++];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (i >= src_.size()) fail(open, "unterminated string literal");
      const char e = src_[i++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '0': value += '\0'; break;
        case '\\': case '\'': case '"': value += e; break;
        case '\n': break;  // a line continuation
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k, ++i) {
            if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i])))
              fail(i - 2 - k, str_cat("malformed \\", e, " escape in a string literal"));
            cp = cp * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(src_[i])) ? src_[i] - '0'
                                                                                      : std::tolower(src_[i]) - 'a' + 10);
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            fail(i - n - 2, "escape names no Unicode scalar value");
          utf8_append(value, char32_t(cp));
          break;
        }
        default: value += '\\', value += e;
      }
    }
    seg.tokens.push_back({Tok::string, std::move(value), {}, pos_of(open)});
    return i;
  }
};

// ---- the parser -------------------------------------------------------------------------------

class Parser {
 public:
  Parser(std::vector<Segment> segments, const std::string& origin) : segs_(std::move(segments)), origin_(origin) {}

  Body parse() { return parse_body({}, nullptr); }

 private:
  std::vector<Segment> segs_;
  const std::string& origin_;
  size_t seg_ = 0;       // the segment being read
  size_t tok_ = 0;       // the token in it
  int depth_ = 0;        // nesting of blocks and sub-expressions

  [[noreturn]] void fail(Pos p, const std::string& what) const {
    throw ConfigError(str_cat(origin_, " line ", p.line, " column ", p.column, ": ", what));
  }

  struct Nest {
    Parser& p;
    Nest(Parser& parser, Pos pos) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail(pos, str_cat("nested more than ", kMaxNesting, " deep"));
    }
    ~Nest() { --p.depth_; }
  };

  // ---- tokens of the current tag
  const Token& peek(size_t ahead = 0) const {
    const auto& toks = segs_[seg_].tokens;
    return toks[std::min(tok_ + ahead, toks.size() - 1)];
  }
  const Token& next() {
    const Token& t = peek();
    if (t.kind != Tok::end) ++tok_;
    return t;
  }
  bool at_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == Tok::op && peek(ahead).text == op; }
  bool at_name(const char* n, size_t ahead = 0) const { return peek(ahead).kind == Tok::name && peek(ahead).text == n; }
  bool accept_op(const char* op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(const char* n) {
    if (!at_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    if (t.kind == Tok::end) return "the end of the tag";
    if (t.kind == Tok::string) return "a string";
    return str_cat("'", t.text, "'");
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(peek().pos, str_cat("expected '", op, "', got ", describe(peek())));
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Tok::name) fail(peek().pos, str_cat("expected ", what, ", got ", describe(peek())));
    return next().text;
  }
  void expect_end() {
    if (peek().kind != Tok::end) fail(peek().pos, str_cat("expected the end of the tag, got ", describe(peek())));
  }

  // ---- statements

  // Reads nodes until a block tag whose keyword is in `stops` (left unread, its keyword in *stop).
  Body parse_body(const std::vector<std::string>& stops, std::string* stop) {
    Body body;
    while (seg_ < segs_.size()) {
      Segment& s = segs_[seg_];
      tok_ = 0;
      if (s.kind == TagKind::text) {
        body.push_back({NodeKind::text, s.pos, std::move(s.text), {}, {}, {}, {}, {}, {}, {}});
        ++seg_;
        continue;
      }
      if (s.kind == TagKind::output) {
        Node n{NodeKind::output, s.pos, {}, parse_expression(), {}, {}, {}, {}, {}, {}};
        expect_end();
        ++seg_;
        body.push_back(std::move(n));
        continue;
      }
      if (peek().kind != Tok::name) fail(peek().pos, str_cat("expected a tag name, got ", describe(peek())));
      const std::string keyword = peek().text;
      for (const auto& st : stops)
        if (keyword == st) {
          *stop = keyword;
          return body;
        }
      next();
      body.push_back(parse_statement(keyword, s.pos));
    }
    if (stop) stop->clear();
    return body;
  }

  // Reads the rest of a block tag that opened a body and advances past it.
  void end_tag() {
    expect_end();
    ++seg_;
  }

  // The body of a block up to one of `stops` (in `stop`), leaving the tokens of that tag after
  // its keyword to read.
  Body parse_nested(Pos open, const std::vector<std::string>& stops, std::string& stop, const char* opened_by) {
    Nest nest(*this, open);
    Body b = parse_body(stops, &stop);
    if (stop.empty())
      fail(open, str_cat("'{% ", opened_by, " %}' is not closed: the template ends before '{% ", stops.back(), " %}'"));
    next();  // the keyword
    return b;
  }

  Node parse_statement(const std::string& keyword, Pos pos) {
    Node n{NodeKind::text, pos, {}, {}, {}, {}, {}, {}, {}, {}};
    if (keyword == "if") {
      n.kind = NodeKind::if_chain;
      ExprPtr cond = parse_expression();
      end_tag();
      while (true) {
        std::string stop;
        Body b = parse_nested(pos, {"elif", "else", "endif"}, stop, "if");
        n.branches.emplace_back(std::move(cond), std::move(b));
        if (stop == "endif") break;
        if (stop == "elif") {
          cond = parse_expression();
          end_tag();
          continue;
        }
        end_tag();  // else
        Body e = parse_nested(pos, {"endif"}, stop, "if");
        n.branches.emplace_back(nullptr, std::move(e));
        break;
      }
      end_tag();
    } else if (keyword == "for") {
      n.kind = NodeKind::for_loop;
      do n.targets.push_back(expect_name("a loop variable"));
      while (accept_op(","));
      if (!accept_name("in")) fail(peek().pos, str_cat("expected 'in', got ", describe(peek())));
      n.expr = parse_expression(/*with_condition=*/false);
      if (accept_name("if")) n.filter = parse_expression(false);
      if (at_name("recursive")) fail(peek().pos, "recursive loops are not supported");
      end_tag();
      std::string stop;
      n.body = parse_nested(pos, {"else", "endfor"}, stop, "for");
      if (stop == "else") {
        end_tag();
        n.else_body = parse_nested(pos, {"endfor"}, stop, "for");
      }
      end_tag();
    } else if (keyword == "set") {
      n.targets.push_back(expect_name("a variable name"));
      if (accept_op(".")) n.attribute = expect_name("an attribute name");
      if (at_op(",")) fail(peek().pos, "'{% set a, b = ... %}' (unpacking) is not supported");
      if (accept_op("=")) {
        n.kind = NodeKind::set;
        n.expr = parse_expression();
        end_tag();
      } else {
        if (!n.attribute.empty()) fail(peek().pos, "a block set assigns a variable, not an attribute");
        n.kind = NodeKind::set_block;
        end_tag();
        std::string stop;
        n.body = parse_nested(pos, {"endset"}, stop, "set");
        end_tag();
      }
    } else if (keyword == "generation") {
      // transformers' {% generation %} marks the assistant's text; it renders its body as is.
      end_tag();
      std::string stop;
      n.kind = NodeKind::if_chain;
      ExprPtr always = literal(Json(true), pos);
      n.branches.emplace_back(std::move(always), parse_nested(pos, {"endgeneration"}, stop, "generation"));
      end_tag();
    } else if (keyword == "break" || keyword == "continue") {
      n.kind = keyword == "break" ? NodeKind::loop_break : NodeKind::loop_continue;
      end_tag();
    } else if (keyword == "elif" || keyword == "else" || keyword == "endif" || keyword == "endfor" ||
               keyword == "endset" || keyword == "endgeneration") {
      fail(pos, str_cat("'{% ", keyword, " %}' without the tag that opens it"));
    } else {
      fail(pos, str_cat("the tag '{% ", keyword, " %}' is not supported by trireme's chat templates (supported: "
                        "if, for, set, break, continue, generation)"));
    }
    return n;
  }

  // ---- expressions, lowest precedence first (as Jinja's parser)

  ExprPtr make(ExprKind k, Pos p, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = k, e->pos = p, e->name = std::move(name);
    return e;
  }
  ExprPtr binary(const std::string& op, Pos p, ExprPtr a, ExprPtr b) {
    ExprPtr e = make(ExprKind::binary, p, op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_expression(bool with_condition = true) {
    Nest nest(*this, peek().pos);
    ExprPtr e = parse_or();
    while (with_condition && at_name("if")) {
      const Pos p = next().pos;
      ExprPtr c = make(ExprKind::cond, p);
      c->args.push_back(std::move(e));
      c->args.push_back(parse_or());
      c->args.push_back(accept_name("else") ? parse_expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (at_name("or")) {
      const Pos p = next().pos;
      e = binary("or", p, std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (at_name("and")) {
      const Pos p = next().pos;
      e = binary("and", p, std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (at_name("not")) {
      Nest nest(*this, peek().pos);
      ExprPtr e = make(ExprKind::unary, next().pos, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      const Pos p = peek().pos;
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
        if (at_op(o)) op = o;
      if (!op.empty()) {
        next();
      } else if (at_name("in")) {
        next(), op = "in";
      } else if (at_name("not") && at_name("in", 1)) {
        next(), next(), op = "not in";
      } else {
        return e ? std::move(e) : std::move(first);
      }
      if (!e) {
        e = make(ExprKind::compare, p);
        e->args.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->args.push_back(parse_math1());
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      e = binary(t.text, t.pos, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      const Pos p = next().pos;
      e = binary("~", p, std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      e = binary(t.text, t.pos, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      const Pos p = next().pos;
      e = binary("**", p, std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      Nest nest(*this, peek().pos);
      const Token& t = next();
      e = make(ExprKind::unary, t.pos, t.text);
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::name: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Json(true), t.pos);
        if (t.text == "false" || t.text == "False") return literal(Json(false), t.pos);
        if (t.text == "none" || t.text == "None") return literal(Json(nullptr), t.pos);
        return make(ExprKind::name, t.pos, t.text);
      }
      case Tok::string: {
        std::string s;
        const Pos p = t.pos;
        while (peek().kind == Tok::string) s += next().text;  // adjacent literals join, as in Python
        return literal(Json(std::move(s)), p);
      }
      case Tok::integer:
      case Tok::floating: {
        next();
        return literal(t.number, t.pos);
      }
      case Tok::op: {
        Nest nest(*this, t.pos);
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make(ExprKind::list, t.pos);
          ExprPtr first = parse_expression();
          if (accept_op(")")) return first;
          ExprPtr tuple = make(ExprKind::list, t.pos);
          tuple->args.push_back(std::move(first));
          while (accept_op(",") && !at_op(")")) tuple->args.push_back(parse_expression());
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          ExprPtr list = make(ExprKind::list, t.pos);
          while (!at_op("]")) {
            list->args.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          ExprPtr dict = make(ExprKind::dict, t.pos);
          while (!at_op("}")) {
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return dict;
        }
        break;
      }
      case Tok::end: fail(t.pos, "expected an expression, got the end of the tag");
    }
    fail(t.pos, str_cat("expected an expression, got ", describe(t)));
  }

  ExprPtr literal(Json v, Pos p) {
    ExprPtr e = make(ExprKind::literal, p);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Pos p = peek().pos;
      if (accept_op(".")) {
        if (peek().kind == Tok::integer) {  // a.0 is a[0] in Jinja
          ExprPtr item = make(ExprKind::item, p);
          item->args.push_back(std::move(e));
          item->args.push_back(literal(next().number, p));
          e = std::move(item);
          continue;
        }
        ExprPtr a = make(ExprKind::attr, p, expect_name("an attribute name"));
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (accept_op("[")) {
        Nest nest(*this, p);
        e = parse_subscript(std::move(e), p);
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object, Pos p) {
    ExprPtr bounds[3];
    bool is_slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!at_op(":") && !at_op("]")) bounds[k] = parse_expression();
      if (k < 2 && accept_op(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    if (!is_slice) {
      if (!bounds[0]) fail(p, "empty subscript '[]'");
      ExprPtr item = make(ExprKind::item, p);
      item->args.push_back(std::move(object));
      item->args.push_back(std::move(bounds[0]));
      return item;
    }
    ExprPtr s = make(ExprKind::slice, p);
    s->args.push_back(std::move(object));
    for (auto& b : bounds) s->args.push_back(std::move(b));
    return s;
  }

  // Arguments in parentheses: positional, then name=value.
  void parse_arguments(Expr& e) {
    Nest nest(*this, peek().pos);
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Tok::name && at_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail(peek().pos, "a positional argument after a keyword argument");
        e.args.push_back(parse_expression());
      }
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr c = make(ExprKind::call, callee->pos);
    c->args.push_back(std::move(callee));
    parse_arguments(*c);
    return c;
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      const Pos p = peek().pos;
      if (accept_op("|")) {
        const Pos at = peek().pos;
        ExprPtr f = make(ExprKind::filter, at, expect_name("a filter name"));
        if (!is_known_filter(f->name)) fail(f->pos, unknown_filter_message(f->name));
        f->args.push_back(std::move(e));
        if (at_op("(")) parse_arguments(*f);
        e = std::move(f);
      } else if (accept_name("is")) {
        ExprPtr t = make(ExprKind::test, p);
        t->negated = accept_name("not");
        t->pos = peek().pos;
        t->name = expect_name("a test name");
        if (!is_known_test(t->name)) fail(t->pos, unknown_test_message(t->name));
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          parse_arguments(*t);
        } else if ((peek().kind == Tok::string || peek().kind == Tok::integer || peek().kind == Tok::floating ||
                    (peek().kind == Tok::name && !at_name("and") && !at_name("or") && !at_name("else") &&
                     !at_name("if") && !at_name("is") && !at_name("in") && !at_name("not")))) {
          // A test's one argument may follow without parentheses: `x is divisibleby 3`.
          t->args.push_back(parse_primary());
          t->args.back() = parse_postfix(std::move(t->args.back()));
        }
        e = std::move(t);
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse_template(const std::string& source, const std::string& origin) {
  Scanner scanner(source, origin);
  return Parser(scanner.scan(), origin).parse();
}

}  // namespace trireme::io::jinja
