# SPDX-License-Identifier: Apache-2.0
# Runs COMMAND (a ;-list) and passes when it fails (non-zero status) within LIMIT
# seconds and its output matches PATTERN: a fault must end every rank, with the
# original error, well within the watchdog.
string(TIMESTAMP start "%s")
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${LIMIT})
string(TIMESTAMP end "%s")
math(EXPR elapsed "${end} - ${start}")
if(status EQUAL 0)
  message(FATAL_ERROR "expected a failure, got status 0\n${out}\n${err}")
endif()
if(status MATCHES "timeout")
  message(FATAL_ERROR "still running after ${LIMIT} s: a rank hung\n${out}\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
  message(FATAL_ERROR "output does not match '${PATTERN}'\n${out}\n${err}")
endif()
message(STATUS "failed as expected (status ${status}) in ${elapsed} s")
