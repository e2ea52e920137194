'use strict';
// Handles: the FinalizationRegistry safety net that frees what was never closed, and livePtr,
// a handle's pointer or the error for a closed one. An object's `_core` is `{ptr, free}`.

const { closedError } = require('./errors');

const finalizer = new FinalizationRegistry((core) => {
  if (core.ptr) {
    const p = core.ptr;
    core.ptr = null;
    core.free(p);
  }
});

function livePtr(core, what) {
  if (!core.ptr) throw closedError(what);
  return core.ptr;
}

module.exports = {
  finalizer,
  livePtr,
};
