"""ps.size() of a worker that named the servers and its rank itself
(ps.init(servers=[...], rank=R)), against a 2-worker job through the
launcher: the servers' answer to the declaration says 2, not a guessed 1.
Run by //tests:python_size_test."""

import python_launch


def test_size_comes_from_the_servers_without_the_launchers_variables():
    job = python_launch.run("tests/python_size_program.py",
                            flags=["--num_workers=2", "--num_servers=2",
                                   "--optimizer=sgd"])
    for rank in (0, 1):
        result = job.result(rank)
        assert result["size"] == 2, result
        assert "not known yet" in result["before"], result
