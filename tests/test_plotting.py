"""The shared figure helpers."""

from mechjax import plotting


def test_save_writes_the_figure_closes_it_and_returns_its_path(tmp_path):
  fig, ax = plotting.plt.subplots()
  ax.plot([0, 1], [1, 0])
  path = str(tmp_path / "line.png")
  assert plotting.save(fig, path) == path
  assert (tmp_path / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not plotting.plt.fignum_exists(fig.number)


def test_label_panel_sets_the_title_labels_grid_and_legend():
  fig, (a, b) = plotting.plt.subplots(1, 2)
  a.plot([0, 1], [0, 1], label="line")
  plotting.label_panel(a, "title", "y", "x", grid="y", legend=6)
  assert (a.get_title(), a.get_ylabel(), a.get_xlabel()) == ("title", "y", "x")
  assert a.title.get_fontsize() == 10
  assert a.get_legend().get_texts()[0].get_fontsize() == 6
  assert any(line.get_visible() for line in a.yaxis.get_gridlines())
  assert not any(line.get_visible() for line in a.xaxis.get_gridlines())
  plotting.label_panel(b, "t", "y", grid="", legend=None)
  assert b.get_xlabel() == "" and b.get_legend() is None
  assert not any(line.get_visible() for line in b.yaxis.get_gridlines())
  plotting.plt.close(fig)
