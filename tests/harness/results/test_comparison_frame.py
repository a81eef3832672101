"""The comparison frame is one consolidated frame: pandas' merge of the held-out columns once left it
at one block per column (~140), and every column a figure added afterwards printed a PerformanceWarning
("DataFrame is highly fragmented") on every `harness run` and `harness report`."""
import warnings

from pandas.errors import PerformanceWarning

from harness.results import compare, plots, tables


def test_the_comparison_with_held_out_columns_takes_new_columns_without_a_warning(heldout_run):
    t = tables.read(heldout_run)
    assert not t.evals.empty
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        comp = compare.comparison(t.updates, t.cells, t.evals)
        assert len(comp.columns) > 100 and comp._mgr.nblocks < 100       # the held-out columns are joined
        figure = plots.draw_quality_vs_bytes(comp)                        # its assign adds two columns
    plots.plt.close(figure.fig)
