"""Build ``tests/data/curate_formats.jsonl``: the labelled set that measures curation's answer-centric rules.

``python tests/data/build_curate_formats.py`` (reads ``../shared/data`` in place; see
``curate_formats.SOURCE.md``). Each row: ``id``, ``problem``, ``task_type`` (the hand label: ``proof``,
``other_answer``, ``multiple_choice``, ``true_false``, ``fill_in_blank``), ``format`` (how it is written)
and ``source``. Only the rows labelled here are copied, never a whole dataset. The rewrites use the
formats exam datasets write (AMC/AQuA/MMLU/Chinese gaokao/Moodle styles ...), chosen before the rules
were measured on this set.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "data"
OUT = HERE / "curate_formats.jsonl"

# ProcessBench rows whose text itself is multiple choice / fill-in (hand-labelled after reading each one);
# omnimath-517 is an ordering task (answer-based, not one of the three rule types)
PB_LABELS = {
    "math-273": "multiple_choice", "math-324": "multiple_choice", "math-405": "fill_in_blank",
    "math-515": "multiple_choice", "math-540": "multiple_choice", "math-610": "multiple_choice",
    "math-707": "multiple_choice", "math-713": "multiple_choice", "math-919": "multiple_choice",
    "omnimath-269": "multiple_choice", "omnimath-319": "multiple_choice", "omnimath-388": "multiple_choice",
    "omnimath-446": "multiple_choice", "omnimath-450": "multiple_choice", "omnimath-500": "multiple_choice",
    "omnimath-981": "multiple_choice", "omnimath-517": "other_answer",
    # context mentions and proof-like conditions (not answer-centric formats)
    "gsm8k-214": "other_answer", "omnimath-964": "other_answer", "omnimath-369": "other_answer",
    "math-424": "other_answer", "math-879": "other_answer",
}
# hand-checked random sample (seed 26, 15 per subset, rows above excluded): all answer-based word problems
SAMPLE_SEED, SAMPLE_PER_SUBSET = 26, 15
REWRITE_SEED = 2026

MC_FORMATS = {  # name -> (stem, options) -> text
    "paren_inline": lambda s, o: f"{s} (A) {o[0]} (B) {o[1]} (C) {o[2]} (D) {o[3]}",
    "paren_lines": lambda s, o: s + "\n" + "\n".join(f"({k}) {v}" for k, v in zip("ABCDE", o)),
    "close_inline": lambda s, o: f"{s} A) {o[0]} B) {o[1]} C) {o[2]} D) {o[3]}",
    "close_lines": lambda s, o: s + "\n" + "\n".join(f"{k}) {v}" for k, v in zip("ABCD", o)),
    "dot_lines": lambda s, o: s + "\n" + "\n".join(f"{k}. {v}" for k, v in zip("ABCD", o)),
    "dot_inline": lambda s, o: s + "  " + "   ".join(f"{k}. {v}" for k, v in zip("ABCD", o)),
    "colon_lines": lambda s, o: s + "\n" + "\n".join(f"{k}: {v}" for k, v in zip("ABCD", o)),
    "bracket_inline": lambda s, o: s + " " + " ".join(f"[{k}] {v}" for k, v in zip("ABCD", o)),
    "fullwidth_paren": lambda s, o: s + "（　）\n" + "　".join(f"（{k}）{v}" for k, v in zip("ＡＢＣＤ", o)),
    "fullwidth_dot": lambda s, o: s + "（　　）\n" + "  ".join(f"{k}．{v}" for k, v in zip("ＡＢＣＤ", o)),
    "circled": lambda s, o: s + " " + " ".join(f"{k} {v}" for k, v in zip("ⒶⒷⒸⒹ", o)),
    "lower_close": lambda s, o: s + " " + " ".join(f"{k}) {v}" for k, v in zip("abcd", o)),
    "lower_paren_lines": lambda s, o: s + "\n" + "\n".join(f"({k}) {v}" for k, v in zip("abcd", o)),
    "options_header_two": lambda s, o: f"{s}\nOptions: A) {o[0]}  B) {o[1]}",
    "choices_header_lines": lambda s, o: s + "\nChoices:\n" + "\n".join(f"{k}. {v}" for k, v in zip("ABC", o)),
    "amc_latex": lambda s, o: s + "\n\n$\\textbf{(A) }" + o[0] + "\\qquad\\textbf{(B) }" + o[1]
    + "\\qquad\\textbf{(C) }" + o[2] + "\\qquad\\textbf{(D) }" + o[3] + "\\qquad\\textbf{(E) }" + o[4] + "$",
    "aqua_answer_choices": lambda s, o: f"{s}\nAnswer Choices: (A) {o[0]} (B) {o[1]} (C) {o[2]} (D) {o[3]} (E) {o[4]}",
    "mmlu_answer": lambda s, o: s + "\n" + "\n".join(f"{k}. {v}" for k, v in zip("ABCD", o)) + "\nAnswer:",
    "moodle_select_one": lambda s, o: s + "\nSelect one:\n" + "\n".join(f"{k}. {v}" for k, v in zip("abcd", o)),
    "paren_nospace": lambda s, o: s + "".join(f"({k}){v}" for k, v in zip("ABCD", o)),
    "lower_dot_header": lambda s, o: s + "\nChoices: " + " ".join(f"{k}. {v}" for k, v in zip("abc", o)),
    "enumerate_latex": lambda s, o: s + "\n\\begin{enumerate}\n" + "".join(
        f"\\item[({k})] {v}\n" for k, v in zip("ABCD", o)) + "\\end{enumerate}",
}
TF_FORMATS = {
    "true_or_false_prefix": lambda st: f"True or false: {st}",
    "true_false_suffix": lambda st: f"{st} (True/False)",
    "state_whether": lambda st: f"State whether the following statement is true or false. {st}",
    "tf_marker": lambda st: f"T/F: {st}",
    "is_statement_true": lambda st: f"Is the following statement true? {st}",
    "answer_true_or_false": lambda st: f"{st} Answer True or False.",
    "bracket_tf": lambda st: f"[T/F] {st}",
    "decide_if_claim": lambda st: f"Decide if the following claim is correct: {st}",
    "false_or_true_upper": lambda st: f"{st}\nTRUE OR FALSE?",
    "mark_t_or_f": lambda st: f"Mark T or F: {st}",
    "correct_or_incorrect": lambda st: f"Is this statement correct or incorrect? {st}",
}
FIB_FORMATS = {
    "underscores": lambda s: f"{s} The answer is ______.",
    "latex_underline_hspace": lambda s: f"{s} Answer: $\\underline{{\\hspace{{2cm}}}}$",
    "escaped_underscores": lambda s: f"{s} Answer: \\_\\_\\_\\_",
    "fullwidth_blank_parens": lambda s: f"{s} 答案是（　　）。",
    "underline_quad": lambda s: f"{s} The value equals $\\underline{{\\quad}}$.",
    "fill_in_blank_prefix": lambda s: f"Fill in the blank. {s}",
    "blank_token": lambda s: f"{s} Result: [blank]",
    "latex_rule": lambda s: f"{s} The answer is \\rule{{1.5cm}}{{0.4pt}}.",
    "box_char": lambda s: f"{s} Answer: □",
    "fill_in_colon": lambda s: f"Fill in: {s}",
    "boxed_phantom": lambda s: f"{s} Write it in the box: $\\boxed{{\\phantom{{00}}}}$",
    "ascii_blank_parens": lambda s: f"{s} The answer is ( ).",
}
TF_STATEMENTS = [
    "Every bounded monotone sequence of real numbers converges.",
    "The sum of two irrational numbers is always irrational.",
    "If $n^2$ is even then $n$ is even.",
    "Every finite integral domain is a field.",
    "The function $f(x)=|x|$ is differentiable at $0$.",
    "$\\sqrt{2}+\\sqrt{3}$ is rational.",
    "Every group of order $4$ is cyclic.",
    "A continuous function on $[0,1]$ attains its maximum.",
    "There are exactly $25$ primes below $100$.",
    "The series $\\sum 1/n$ converges.",
    "Every subgroup of an abelian group is normal.",
    "The determinant of a product of square matrices is the product of their determinants.",
    "If $a \\mid bc$ then $a \\mid b$ or $a \\mid c$.",
    "$2^{10} > 10^3$.",
    "Every polynomial of odd degree with real coefficients has a real root.",
    "The empty set is a subset of every set.",
    "Any two bases of a finite-dimensional vector space have the same number of elements.",
    "The product of two consecutive integers is always even.",
    "Every convergent sequence is Cauchy.",
    "$\\pi$ is a rational number.",
    "The number of subsets of an $n$-element set is $2^n$.",
    "Every prime greater than $2$ is odd.",
]
# own hard negatives: proof problems that look like options, true/false or blanks, and
# answer-based problems that mention such formats
HARD_NEGATIVES = [
    ("proof", "parts_lower", "(a) Prove that $n^3-n$ is divisible by $6$ for every integer $n$.\n(b) Show that $n^5-n$ is divisible by $30$.\n(c) Find all $n$ for which $n^2+1$ is divisible by $3$, and prove your answer."),
    ("proof", "parts_upper", "(A) Prove that every tree with $n$ vertices has $n-1$ edges. (B) Show that a graph with $n$ vertices and $n$ edges contains a cycle. (C) Deduce that a forest with $k$ components has $n-k$ edges."),
    ("proof", "conditions_lower", "Find all functions $f:\\mathbb{R}\\to\\mathbb{R}$ such that\n(a) $f(0)=1$,\n(b) $f(x+y)=f(x)f(y)$ for all $x,y$,\n(c) $f$ is continuous.\nProve that your list is complete."),
    ("proof", "conditions_lower_colon", "Let $f:\\mathbb{N}\\to\\mathbb{N}$ satisfy: (a) $f(1)=1$; (b) $f(2n)=f(n)$; (c) $f(2n+1)=f(n)+1$; (d) $f(n)\\le n$. Prove that $f(n)$ is the number of ones in the binary expansion of $n$."),
    ("proof", "points_labels", "Let $A$, $B$, $C$, $D$ be four points on a circle in this order. Prove that $AC\\cdot BD = AB\\cdot CD + AD\\cdot BC$."),
    ("proof", "cases_colon", "Prove that $x^2+y^2+z^2\\ge xy+yz+zx$ for all reals. Consider Case A: $x\\ge y\\ge z$. Case B: $x\\ge z\\ge y$. Case C: the remaining orders."),
    ("proof", "function_values", "Let $P$ be a polynomial with integer coefficients. Prove that $P(a)-P(b)$ is divisible by $a-b$ for all integers $a\\neq b$, and deduce that $P(a), P(b), P(c)$ cannot be $b, c, a$ for distinct $a, b, c$."),
    ("proof", "is_it_true", "Is it true that for every positive integer $n$ the number $n^2+n+41$ is prime? Justify your answer with a proof or a counterexample."),
    ("proof", "underline_segment", "In triangle $ABC$ let $\\underline{AB}$ denote the side opposite $C$. Prove that the bisector of angle $C$ divides $\\underline{AB}$ in the ratio $CA:CB$."),
    ("proof", "players_choose", "Two players alternately choose one of the numbers $1,2,\\dots,9$ not chosen before. The first to hold three numbers summing to $15$ wins. Prove that neither player can force a win."),
    ("proof", "options_word", "A frog at the origin has two options at each step: jump one unit right or one unit up. Prove that the number of paths to $(m,n)$ is $\\binom{m+n}{m}$."),
    ("proof", "statement_is_true", "Prove that the following statement is true for every $n\\ge1$: $1+3+\\cdots+(2n-1)=n^2$."),
    ("proof", "lower_labels_sets", "Let $a, b, c, d$ be positive reals with $a+b+c+d=4$. Prove that $\\frac{1}{a}+\\frac{1}{b}+\\frac{1}{c}+\\frac{1}{d}\\ge 4$."),
    ("proof", "roman_parts", "(i) Prove that $\\sqrt{2}$ is irrational. (ii) Prove that $\\sqrt{2}+\\sqrt{3}$ is irrational. (iii) Prove that $\\log_2 3$ is irrational."),
    ("proof", "numbered_conditions", "A sequence satisfies (1) $a_1=1$, (2) $a_{n+1}=a_n+2n+1$. Prove that $a_n=n^2$ for all $n$."),
    ("proof", "quotient_group", "Let $G$ be a group and $N$ a normal subgroup. Prove that if $G/N$ and $N$ are finitely generated then so is $G$."),
    ("proof", "interval_parens", "Prove that the equation $x^3-3x+1=0$ has exactly three real roots, one in each of the intervals $(-2,-1)$, $(0,1)$ and $(1,2)$."),
    ("proof", "labelled_claims", "Consider the claims\nA. every square is a rectangle;\nB. every rectangle is a parallelogram.\nProve both claims from the axioms of Euclidean geometry."),
    ("other_answer", "mention_multiple_choice", "A multiple-choice test has 10 questions with 4 options each. In how many ways can a student answer all questions?"),
    ("other_answer", "mention_true_false", "A quiz has 8 true/false questions. How many answer sheets have exactly 5 correct answers if the key is fixed?"),
    ("other_answer", "mention_fill_blanks", "Maria spends 12 minutes per page filling blanks in a workbook of 15 pages. How many hours does she spend?"),
    ("other_answer", "letters_as_values", "Let $A=3$, $B=5$ and $C=A+B$. Compute $A\\cdot B\\cdot C$."),
    ("other_answer", "points_coordinates", "Points $A(1,2)$, $B(4,6)$ and $C(7,2)$ form a triangle. What is its area?"),
    ("other_answer", "product_parens", "Compute $(1+a)(1+b)(1+c)(1+d)$ when $a=1$, $b=2$, $c=3$ and $d=4$."),
    ("other_answer", "answer_format_instruction", "How many positive divisors does $360$ have? Give your answer as an integer."),
]

# written after the rules were fixed on the rows above and measured once, with no change to the rules
# afterwards: their figures are the unbiased estimate (docs/data_pipeline.md)
FRESH = [
    ("multiple_choice", "What is the remainder when $7^{100}$ is divided by $5$?\n\nA) 0\nB) 1\nC) 2\nD) 3\nE) 4"),
    ("multiple_choice", "How many diagonals does a convex decagon have?   (A) 35   (B) 40   (C) 45   (D) 50"),
    ("multiple_choice", "The sum of the interior angles of a hexagon is\na. 540°\nb. 720°\nc. 900°\nd. 1080°"),
    ("multiple_choice", "Solve $2x+3=11$.\nOptions:\n(1) x=3\n(2) x=4\n(3) x=5\n(4) x=7"),
    ("multiple_choice", "Let $f(x)=x^3$. Then $f'(2)=$ ___ ? Choose from: A. 4, B. 8, C. 12, D. 16"),
    ("multiple_choice", "Question: Find the degree of the extension $\\mathbb{Q}(\\sqrt 2,\\sqrt 3)$ over $\\mathbb{Q}$.\nA. 0\nB. 4\nC. 2\nD. 6\nAnswer:"),
    ("multiple_choice", "若 $x^2=4$，则 $x$ 的值是（　）\nＡ．２　Ｂ．－２　Ｃ．±２　Ｄ．４"),
    ("multiple_choice", "Which is the largest? Ⓐ $2^{30}$ Ⓑ $3^{20}$ Ⓒ $5^{12}$ Ⓓ $10^{9}$"),
    ("multiple_choice", "A fair die is rolled twice. The probability that the sum is 7 is $\\textbf{(A)}\\ \\frac{1}{6} \\qquad \\textbf{(B)}\\ \\frac{1}{9} \\qquad \\textbf{(C)}\\ \\frac{1}{12} \\qquad \\textbf{(D)}\\ \\frac{5}{36}$"),
    ("multiple_choice", "The number of primes between 10 and 30 is: [a] 4 [b] 5 [c] 6 [d] 7"),
    ("multiple_choice", "Identify the correct value of $\\log_2 32$.\nA: 4\nB: 5\nC: 6"),
    ("multiple_choice", "Pick the correct answer. $\\gcd(84,120)=$ (a) 6 (b) 12 (c) 24 (d) 42"),
    ("multiple_choice", "What is $\\lim_{x\\to0}\\frac{\\sin x}{x}$? Answer options: A) 0 B) 1 C) infinity D) does not exist"),
    ("multiple_choice", "Evaluate $\\int_0^1 2x\\,dx$.\n（A）0　（B）1　（C）2　（D）1/2"),
    ("multiple_choice", "The graph of $y=x^2-4x+3$ crosses the x-axis at x = ? A. 1 and 3 B. -1 and -3 C. 2 and 4 D. 0 and 4"),
    ("multiple_choice", "Which option gives the roots of $x^2-5x+6$? 1) 2 and 3 2) -2 and -3 3) 1 and 6 4) -1 and -6"),
    ("true_false", "True/False: every compact metric space is complete."),
    ("true_false", "Say whether this is true or false: $\\mathbb{Z}[x]$ is a principal ideal domain."),
    ("true_false", "Decide whether each of the following statements is true or false.\n1. $e^{i\\pi}=-1$.\n2. $0.999\\ldots<1$."),
    ("true_false", "The map $x\\mapsto x^2$ is injective on $\\mathbb{R}$. (T or F)"),
    ("true_false", "Is the following assertion correct? Every countable set is finite."),
    ("true_false", "Answer with TRUE or FALSE: the harmonic series diverges."),
    ("true_false", "Determine if the statement is true: every bounded sequence has a convergent subsequence."),
    ("true_false", "Statement: $\\sqrt{4}=\\pm 2$. Is it true or false?"),
    ("fill_in_blank", "Complete the sentence: the derivative of $\\ln x$ is __________."),
    ("fill_in_blank", "The area of a circle of radius 3 is $\\underline{\\qquad\\qquad}$."),
    ("fill_in_blank", "If $2^x=64$, then $x=$ \\_\\_\\_."),
    ("fill_in_blank", "函数 $y=\\sin 2x$ 的最小正周期是________。"),
    ("fill_in_blank", "Fill in the missing number: 2, 4, 8, ?, 32."),
    ("fill_in_blank", "The sum $1+2+\\cdots+100$ equals \\blank."),
    ("fill_in_blank", "Fill in the blanks: a triangle with sides 3, 4, 5 has area ___ and perimeter ___."),
    ("fill_in_blank", "Compute $7\\times 8 = \\underline{\\hspace{1.5cm}}$."),
    ("proof", "Let $a,b,c>0$. Prove that $(a+b)(b+c)(c+a)\\ge 8abc$, with equality iff a) all three are equal, which we verify directly."),
    ("proof", "Players A, B and C sit around a table. A. Smith proposes a game; prove that B can always win."),
    ("proof", "Determine whether there exists a function $f:\\mathbb{N}\\to\\mathbb{N}$ with $f(f(n))=n+1$. Prove your answer."),
    ("proof", "Show that for every $n$ the following holds:\n(a) $n^2\\equiv 0,1 \\pmod 4$;\n(b) $n^2\\equiv 0,1,4 \\pmod 8$ for odd $n$;\n(c) $n^4\\equiv 0,1 \\pmod{16}$."),
    ("proof", "Let $ABCD$ be a square and let the points $E$, $F$ lie on $BC$, $CD$. Suppose (A) $BE=CF$, (B) $AE\\perp BF$. Prove that (A) implies (B)."),
    ("proof", "Prove that the statement 'every even integer greater than 2 is a sum of two primes' holds for all even integers up to 100."),
    ("proof", "Let $p$ be prime. Prove that $(p-1)!\\equiv -1 \\pmod p$ (Wilson's theorem). Fill in every detail of the argument."),
    ("proof", "Prove that $\\sum_{k=1}^n k^3 = \\left(\\frac{n(n+1)}{2}\\right)^2$ for every positive integer $n$."),
    ("other_answer", "A test has 20 true-false questions. A student guesses every answer. What is the expected number of correct answers?"),
    ("other_answer", "There are 5 options for lunch and 3 for dessert. How many lunch-dessert combinations are there?"),
]


def load_processbench() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in ("gsm8k", "math", "olympiadbench", "omnimath"):
        for r in json.loads((SHARED / "processbench" / f"{name}.json").read_text(encoding="utf-8")):
            out.setdefault(r["id"], r["problem"])
    return out


def unique_ids(pb: dict[str, str], subset: str) -> list[str]:
    seen, ids = set(), []
    for i, p in pb.items():
        if i.startswith(subset + "-") and p not in seen:
            seen.add(p)
            ids.append(i)
    return ids


def distractors(rng: random.Random) -> list[str]:
    base = rng.randint(2, 90)
    vals = rng.sample([base + d for d in range(-6, 7) if base + d > 0], 5)
    return [str(v) if rng.random() < 0.6 else f"${v}$" for v in vals]


def build() -> list[dict]:
    rows: list[dict] = []
    with open(SHARED / "imo_proofbench_v2" / "proofbench_v2.csv", encoding="utf-8") as f:
        proofbench = list(csv.DictReader(f))
    for r in proofbench[::2]:  # every other problem: 30 proof rows (the test reads all 60 from ../shared/data)
        rows.append({"id": r["Problem ID"], "problem": r["Problem"], "task_type": "proof", "format": "proof",
                     "source": "imo_proofbench_v2"})
    pb = load_processbench()
    for pid, label in PB_LABELS.items():
        rows.append({"id": pid, "problem": pb[pid], "task_type": label, "format": "as_published",
                     "source": "processbench"})
    rng = random.Random(SAMPLE_SEED)
    used = set(PB_LABELS)
    for subset in ("gsm8k", "math", "olympiadbench", "omnimath"):
        pick = rng.sample([i for i in unique_ids(pb, subset) if i not in used], SAMPLE_PER_SUBSET)
        for pid in sorted(pick, key=lambda x: int(x.split("-")[1])):
            used.add(pid)
            rows.append({"id": pid, "problem": pb[pid], "task_type": "other_answer", "format": "as_published",
                         "source": "processbench"})
    # rewrites: stems are further ProcessBench gsm8k/math problems (short ones), options invented
    rng = random.Random(REWRITE_SEED)
    stems = [i for s in ("gsm8k", "math") for i in unique_ids(pb, s)
             if i not in used and len(pb[i]) < 400 and "[asy]" not in pb[i]]
    rng.shuffle(stems)
    stems_iter = iter(stems)
    for rep in range(3):
        for name, fmt in MC_FORMATS.items():
            if rep == 2 and name not in ("paren_inline", "dot_lines", "lower_close", "circled", "amc_latex",
                                         "fullwidth_dot", "colon_lines", "bracket_inline"):
                continue
            pid = next(stems_iter)
            rows.append({"id": f"mc-{name}-{rep}", "problem": fmt(pb[pid].strip(), distractors(rng)),
                         "task_type": "multiple_choice", "format": f"mc:{name}", "source": f"rewrite of {pid}"})
    for k, (name, fmt) in enumerate(list(TF_FORMATS.items()) * 2):
        st = TF_STATEMENTS[k % len(TF_STATEMENTS)]
        rows.append({"id": f"tf-{name}-{k // len(TF_FORMATS)}", "problem": fmt(st), "task_type": "true_false",
                     "format": f"tf:{name}", "source": "own statement"})
    for rep in range(2):
        for name, fmt in FIB_FORMATS.items():
            pid = next(stems_iter)
            rows.append({"id": f"fib-{name}-{rep}", "problem": fmt(pb[pid].strip()), "task_type": "fill_in_blank",
                         "format": f"fib:{name}", "source": f"rewrite of {pid}"})
    for k, (label, name, text) in enumerate(HARD_NEGATIVES):
        rows.append({"id": f"neg-{name}", "problem": text, "task_type": label, "format": f"neg:{name}",
                     "source": "own"})
    for k, (label, text) in enumerate(FRESH):
        rows.append({"id": f"fresh-{k:02d}", "problem": text, "task_type": label, "format": "fresh",
                     "source": "own, written after the rule fixes"})
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate ids"
    return rows


def main() -> None:
    rows = build()
    with OUT.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["task_type"]] = counts.get(r["task_type"], 0) + 1
    print(f"wrote {len(rows)} rows to {OUT}: {counts}")


if __name__ == "__main__":
    main()
