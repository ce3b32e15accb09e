"""Research tooling beside the plugin: making and describing data sets, and training the
learned readings the plugin ships. A pytest run never imports this package (a test holds
it); the ``python -m pytest_socialbias`` subcommands import its modules when they run.

- ``generate.py``, ``grid.py``: ``generate-benevdial``, labelled BenevDial dialogues from
  generator models, the paper style's crossed grid and its class-balanced sampler;
- ``quality.py``: ``quality``, MTLD, Self-BLEU-4 and Vendi of a labelled dialogue file;
- ``marker_report.py``: ``markers``, the surface markers of a dialogue file with Cohen's d
  and its interval (the markers themselves are ``benevdial/markers.py``'s);
- ``lexicon.py``: ``annotation-sample`` and ``cue-words``;
- ``agreement.py``: ``agreement``, agreement among raters of labelled items;
- ``train_turn_model.py``, ``train_turn_embed.py``: training of the learned and the
  embedded readings of simulated users' turns (``python -m
  pytest_socialbias.research.train_turn_model train SETS``), whose weights the run reads
  from ``data/``.
"""
