"""The first futures swap: only the import changes."""

# from concurrent.futures import ProcessPoolExecutor
from pipepool import ProcessPoolExecutor


def square(n: int) -> int:
    return n * n


if __name__ == "__main__":
    with ProcessPoolExecutor(max_workers=2) as pool:
        future = pool.submit(square, 12)
        squares = list(pool.map(square, range(1000), chunksize=50))
    assert future.result() == 144 and squares[-1] == 999 * 999
    print(future.result(), sum(squares))
