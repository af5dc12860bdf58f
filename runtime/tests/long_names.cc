// Allocates through deeply templated C++ (nested containers, a std::function, a lambda), so the
// profile's function names are hundreds of characters long: what `memlens report` must fit into
// the terminal by shortening them.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace outer_namespace_of_the_service {
namespace detail {
template <typename Key, typename Value>
struct Registry {
    std::map<Key, std::vector<Value>> entries;

    __attribute__((noinline)) void add_entry(const Key& k, const Value& v,
                                             const std::function<void(const Value&)>& done)
    {
        entries[k].push_back(v);
        done(v);
    }
};
}  // namespace detail
}  // namespace outer_namespace_of_the_service

int main()
{
    outer_namespace_of_the_service::detail::Registry<std::string, std::map<int, std::string>> r;
    size_t seen = 0;
    for (int i = 0; i < 100000; i++) {
        std::map<int, std::string> v;
        v[i] = std::string(100, 'x');
        r.add_entry(std::to_string(i % 1000) + std::string(40, 'k'), v,
                    [&seen](const std::map<int, std::string>& m) { seen += m.size(); });
    }
    return seen == 100000 ? 0 : 1;
}
