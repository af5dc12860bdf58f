// A service-shaped C++ program with a fragmented heap (issue 29, item 1): four threads keep records
// (a name and a vector of values) in a std::map and in a std::vector of keys, free about half of
// them at random as they go, and leak one in 500 into a list nobody frees (a slow leak). glibc's
// heap ends up with hundreds of thousands of free chunks spread over four arenas: the shape on which
// a call whose cost grows with the heap (mallinfo2 walks every free chunk) shows.
//
//   fragment [RECORDS_PER_THREAD [THREADS]]     (defaults 300000, 4)
//
// Prints the records kept and leaked, so that the work is not optimised away. The benchmark
// (docs/benchmarks.md, scripts/harmless-bench.sh) compares its user CPU under memlens with bare.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Record {
    std::string name;
    std::vector<double> values;
};

std::mutex leak_lock;
std::vector<Record *> leaked; // the slow leak: never freed

uint64_t next(uint64_t &x)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

void work(int id, long records, long *kept)
{
    uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(id + 1);
    std::map<uint64_t, Record> table;
    std::vector<uint64_t> keys;
    for (long i = 0; i < records; i++) {
        Record r;
        r.name.assign(16 + next(rng) % 200, (char)('a' + i % 26));
        r.values.resize(1 + next(rng) % 48, (double)i);
        uint64_t key = next(rng);
        if (i % 500 == 0) {
            std::lock_guard<std::mutex> g(leak_lock);
            leaked.push_back(new Record(r));
        }
        table.emplace(key, std::move(r));
        keys.push_back(key);
        // Free about half of what was made, picked at random: the holes stay between live records.
        if (next(rng) % 2 == 0 && !keys.empty()) {
            size_t k = next(rng) % keys.size();
            table.erase(keys[k]);
            keys[k] = keys.back();
            keys.pop_back();
        }
    }
    *kept = (long)table.size();
}

} // namespace

int main(int argc, char **argv)
{
    long records = argc > 1 ? atol(argv[1]) : 300000;
    int threads = argc > 2 ? atoi(argv[2]) : 4;
    std::vector<std::thread> ts;
    std::vector<long> kept((size_t)threads);
    for (int i = 0; i < threads; i++)
        ts.emplace_back(work, i, records, &kept[(size_t)i]);
    long total = 0;
    for (int i = 0; i < threads; i++) {
        ts[(size_t)i].join();
        total += kept[(size_t)i];
    }
    printf("kept %ld leaked %zu\n", total, leaked.size());
    return 0;
}
