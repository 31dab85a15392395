"""Draw the front page's plot from docs/benchmarks.md: round times of TFF 0.87 and simharness.

Reads the table of the section "The loop TFF users write (2026-11-29)" (no number is typed
here) and writes docs/assets/round-times.svg. Run it after that table changes:
`python docs/assets/plot_round_times.py`.
"""
import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[1]
SECTION = '### The loop TFF users write (2026-11-29)'
COLUMNS = ('TFF 0.87', 'thread (default stack)', 'process-2')
LABELS = ('TFF 0.87', 'simharness, threads', 'simharness, 2 worker processes')


def _ms(cell: str):
    m = re.match(r'\s*([\d,]+(?:\.\d+)?)', cell)
    return float(m.group(1).replace(',', '')) if m else None


def read_table(text: str) -> list:
    """[(cohort, case, {column: ms})] for the rows of the section's table that TFF ran."""
    lines = []
    for line in text[text.index(SECTION):].splitlines():   # the section's first table
        if line.startswith('|'):
            lines.append(line)
        elif lines:
            break
    header = [c.strip() for c in lines[0].strip('|').split('|')]
    rows = []
    for line in lines[2:]:
        cells = dict(zip(header, (c.strip() for c in line.strip('|').split('|'))))
        values = {col: _ms(cells[col]) for col in COLUMNS}
        if None not in values.values():
            rows.append((int(cells['cohort']), cells['case'], values))
    return rows


def main() -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows = read_table((DOCS / 'benchmarks.md').read_text())
    names = [f"{cohort} clients,\n{'fresh datasets' if 'fresh' in case else 'same datasets'}"
             for cohort, case, _ in rows]
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    width = 0.27
    colors = ('#9e9e9e', '#3f51b5', '#00897b')
    for i, (col, label, color) in enumerate(zip(COLUMNS, LABELS, colors)):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ys = [values[col] for _, _, values in rows]
        bars = ax.bar(xs, ys, width, label=label, color=color)
        ax.bar_label(bars, labels=[f'{y:,.0f}' for y in ys], fontsize=7, padding=1)
    ax.set_xticks(range(len(rows)), names, fontsize=8)
    ax.set_ylabel('ms per round (lower is faster)', fontsize=8)
    ax.set_title('FedAvg rounds of the loop TFF users write, 2-core machine, 2026-11-29',
                 fontsize=9)
    ax.tick_params(axis='y', labelsize=8)
    ax.spines[['top', 'right']].set_visible(False)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    plt.rcParams['svg.hashsalt'] = 'simharness'
    fig.savefig(DOCS / 'assets' / 'round-times.svg', metadata={'Date': None})


if __name__ == '__main__':
    main()
