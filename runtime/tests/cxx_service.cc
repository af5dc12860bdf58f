// A small four-thread C++ "service" whose heap has a shape a person should find at a glance in
// `memlens report` and its HTML page: an index loaded at start-up through deep std:: frames
// (std::map of std::string to std::vector), per-request temporaries (strings and vectors freed
// within the request), a batch built and released (the peak), and a cache that only grows (the
// leak). Four threads serve requests; each site is a named function of the program's own, so a
// report that hides it behind library frames is wrong.
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace service {

using Index = std::map<std::string, std::vector<std::string>>;

// 20000 keys, each with 4 strings: built once, kept to the end (a few MiB live).
__attribute__((noinline)) Index load_index()
{
    Index idx;
    for (int i = 0; i < 20000; i++) {
        auto& v = idx["key-" + std::to_string(i) + std::string(24, 'k')];
        for (int j = 0; j < 4; j++)
            v.push_back(std::string(48 + j, 'v'));
    }
    return idx;
}

std::mutex cache_mu;
std::vector<char*>* cache = new std::vector<char*>;

// Never freed: 2 KiB per 64 requests (5 MiB in all), the program's leak.
__attribute__((noinline)) void remember(int request)
{
    if (request % 64 != 0)
        return;
    std::lock_guard<std::mutex> g(cache_mu);
    cache->push_back(new char[2048]);
    cache->back()[0] = char(request);
}

// A response assembled from pieces and thrown away: short-lived strings and a vector.
__attribute__((noinline)) size_t handle_request(const Index& idx, int request)
{
    std::vector<std::string> parts;
    for (int k = 0; k < 16; k++)
        parts.push_back(std::string(200 + (request + k) % 300, 'r'));
    std::string body;
    for (auto& p : parts)
        body += p;
    auto it = idx.find("key-" + std::to_string(request % 20000) + std::string(24, 'k'));
    remember(request);
    return body.size() + (it == idx.end() ? 0 : it->second.size());
}

// Once per thread: 64 blocks of 256 KiB held together, then released (the heap's peak).
__attribute__((noinline)) size_t build_batch()
{
    std::vector<std::vector<char>> batch;
    for (int i = 0; i < 64; i++)
        batch.emplace_back(256 * 1024, char(i));
    size_t n = 0;
    for (auto& b : batch)
        n += b[0];
    return n;
}

__attribute__((noinline)) void worker(const Index& idx, int id, size_t* out)
{
    size_t n = 0;
    for (int r = 0; r < 40000; r++) {
        n += handle_request(idx, id * 40000 + r);
        if (r == 20000 + id * 2000)
            n += build_batch();
    }
    *out = n;
}

}  // namespace service

int main()
{
    service::Index idx = service::load_index();
    std::vector<std::thread> threads;
    size_t out[4] = {};
    for (int t = 0; t < 4; t++)
        threads.emplace_back(service::worker, std::cref(idx), t, &out[t]);
    for (auto& t : threads)
        t.join();
    std::printf("served %zu bytes, cache %zu blocks\n", out[0] + out[1] + out[2] + out[3],
                service::cache->size());
    return 0;
}
