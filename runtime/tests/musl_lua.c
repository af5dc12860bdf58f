/* A minimal Lua host (tests/e2e/musl.rs): Lua 5.4 as the crates.io lua-src crate carries it,
 * built with this file by musl-gcc. The script keeps 2000 strings of ~16 KB, collects its garbage
 * and returns Lua's own count of the bytes it holds (collectgarbage("count"), kept by Lua's
 * allocator accounting); the host prints it and exits without closing the state, so what memlens
 * shows in use at exit is what Lua counted. */
#include <stdio.h>

#include "lauxlib.h"
#include "lua.h"
#include "lualib.h"

static const char script[] = "local t = {}\n"
                             "for i = 1, 2000 do t[i] = string.rep('x', 16000) .. i end\n"
                             "held = t\n"
                             "collectgarbage('collect')\n"
                             "return collectgarbage('count')\n";

int main(void)
{
    lua_State *L = luaL_newstate();
    if (!L)
        return 1;
    luaL_openlibs(L);
    if (luaL_dostring(L, script) != LUA_OK) {
        fprintf(stderr, "lua: %s\n", lua_tostring(L, -1));
        return 1;
    }
    printf("lua holds %.0f bytes\n", lua_tonumber(L, -1) * 1024.0);
    fflush(stdout);
    return 0;
}
